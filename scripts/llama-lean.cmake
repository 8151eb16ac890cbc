# Included by llama-cpp-python's CMakeLists right after project() (CMAKE_PROJECT_INCLUDE, set by
# scripts/llama-wheel.sh). llama-cpp-python forces llama.cpp's `common` library on
# (set(LLAMA_BUILD_COMMON ON CACHE ... FORCE)), though the Python package never loads it: a normal
# variable shadows that cache entry (policy CMP0126, on since CMake 3.21, which it requires), so
# common and its cpp-httplib are not compiled. The engine loads libllama and libggml* only.
set(LLAMA_BUILD_COMMON OFF)
