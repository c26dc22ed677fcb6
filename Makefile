# The two commands a new user needs. Both install missing Debian packages, configure, build, run.
#   make demo   end-to-end run of the nmsparse tool on a generated model, with its reports
#   make test   the whole test suite through CTest
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: demo test

demo:
	@scripts/install-deps.sh
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) --parallel $(JOBS)
	@scripts/demo.sh $(BUILD)

test:
	@scripts/install-deps.sh
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) --parallel $(JOBS)
	@ctest --test-dir $(BUILD) --output-on-failure --parallel $(JOBS)
