# llama.cpp's build for the tests' upstream (benchmarks/llama_cpp.py, Build.TESTS), included by
# CMake after each project() through CMAKE_PROJECT_INCLUDE.
#
# Only ggml, the arithmetic, stays optimised; every other target (the server, its HTTP and JSON
# code, chat templates, libllama's bookkeeping, the multimodal library the server links) is
# compiled with -O0, which takes about 60% of -O3's time for this template-heavy C++. A token
# still costs what the kernels cost; the tests measure the protocol, never the speed, and the
# benchmark keeps its own build as llama.cpp ships it.
include_guard(GLOBAL)

function(chatapp_targets_below directory out)
  get_property(targets DIRECTORY "${directory}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirectories DIRECTORY "${directory}" PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    chatapp_targets_below("${subdirectory}" more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(chatapp_unoptimised_outside_ggml)
  chatapp_targets_below("${CMAKE_SOURCE_DIR}" targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(NOT target MATCHES "^ggml" AND type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$")
      # After CMAKE_<LANG>_FLAGS_RELEASE's -O3 on the command line, so it wins.
      target_compile_options(${target} PRIVATE -O0)
    endif()
  endforeach()
endfunction()

# At the end of the top directory, when every target exists.
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL chatapp_unoptimised_outside_ggml)
