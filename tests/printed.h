#pragma once
// What a function printed to a FILE* (the libraries' print_* functions take the stream they write).
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pipescope::testing_print {

template <class F>
std::string printed(F&& print) {
  char* buf = nullptr;
  std::size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  try {
    print(f);
  } catch (...) {  // a function that throws mid-table: the stream and its buffer are still released
    std::fclose(f);
    std::free(buf);
    throw;
  }
  std::fclose(f);
  std::string out(buf, size);
  std::free(buf);
  return out;
}

}  // namespace pipescope::testing_print
