#include <cstdio>

int main() {
  std::puts("nmsparse");
  return 0;
}
