# The two commands a new user needs. Both install missing Debian packages, configure, build, run.
#   make demo   sparse training on Fashion-MNIST, dense vs 2:4 sparse methods (table + plot in
#               demo-out/train/), then the mask/verify/pack tool chain on a generated model
#   make test   the whole test suite through CTest
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: demo test

demo:
	@scripts/install-deps.sh
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) --parallel $(JOBS) --target nmsparse_cli
	@scripts/demo.sh $(BUILD)

test:
	@scripts/install-deps.sh
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) --parallel $(JOBS)
	@ctest --test-dir $(BUILD) --output-on-failure --parallel $(JOBS)
