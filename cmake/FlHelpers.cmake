# fl_library(NAME SRCS ... DEPS ... [PUBLIC_INCLUDE dir] [INSTALL])
# Makes the static library fl_<NAME> with the alias fl::<NAME>, compiled with the project's warnings.
# INSTALL: installed with its public headers and exported as fl::<NAME> in the fl config package.
function(fl_library NAME)
  cmake_parse_arguments(ARG "INSTALL" "PUBLIC_INCLUDE" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(fl_${NAME} STATIC ${ARG_SRCS})
  add_library(fl::${NAME} ALIAS fl_${NAME})
  if(ARG_PUBLIC_INCLUDE)
    target_include_directories(fl_${NAME} PUBLIC
      $<BUILD_INTERFACE:${ARG_PUBLIC_INCLUDE}> $<INSTALL_INTERFACE:include>)
  endif()
  target_include_directories(fl_${NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(fl_${NAME} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  # The public headers are C++20 (std::span, designated initialisers): a usage requirement, so a
  # consumer of the installed package compiles them without setting a standard of its own.
  target_compile_features(fl_${NAME} PUBLIC cxx_std_20)
  target_compile_options(fl_${NAME} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  set_target_properties(fl_${NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(ARG_INSTALL)
    set_target_properties(fl_${NAME} PROPERTIES EXPORT_NAME ${NAME})
    install(TARGETS fl_${NAME} EXPORT flTargets ARCHIVE DESTINATION lib)
    install(DIRECTORY ${ARG_PUBLIC_INCLUDE}/ DESTINATION include)
  endif()
endfunction()

# fl_test(NAME SRCS ... DEPS ...): a GoogleTest executable registered with CTest.
function(fl_test NAME)
  cmake_parse_arguments(ARG "SERIAL" "" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${NAME} ${ARG_SRCS})
  target_include_directories(${NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_options(${NAME} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  # SERIAL: each test runs alone under `ctest -j`, for tests that restart a server on a fixed port
  # and must not lose it, or the machine's time, to a test running beside them.
  set(serial FALSE)
  if(ARG_SERIAL)
    set(serial TRUE)
  endif()
  gtest_discover_tests(${NAME} DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "${ARG_LABELS}" RUN_SERIAL ${serial})
endfunction()
