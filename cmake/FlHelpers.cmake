# Internal headers stay where their component keeps them (server/engine/engine_impl.h) and are
# included by that path, but the repository root is no target's include folder: each component
# gets a root of its own, ${PROJECT_BINARY_DIR}/internal_include/<component>, holding one link,
# <component> -> the component's folder. A target sees its own component's internal headers
# (fl_library adds its root) and another's only when it names that component (INTERNAL), so a
# site's client cannot include the server's headers, nor a layer those of one above it.
#
# fl_internal_root(COMPONENT): makes the root and the INTERFACE target fl::<COMPONENT>_internal
# that gives it (for executables, tests and benchmarks).
function(fl_internal_root COMPONENT)
  set(root ${PROJECT_BINARY_DIR}/internal_include/${COMPONENT})
  file(MAKE_DIRECTORY ${root})
  # A build folder copied with its links followed holds a directory there: replace it.
  if(EXISTS ${root}/${COMPONENT} AND NOT IS_SYMLINK ${root}/${COMPONENT})
    file(REMOVE_RECURSE ${root}/${COMPONENT})
  endif()
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${COMPONENT} ${root}/${COMPONENT} SYMBOLIC
       RESULT linked)
  if(NOT linked EQUAL 0)
    message(FATAL_ERROR "fl: cannot link ${root}/${COMPONENT} to ${PROJECT_SOURCE_DIR}/${COMPONENT} "
                        "(${linked}): the build folder must be on a file system with symbolic "
                        "links")
  endif()
  add_library(fl_${COMPONENT}_internal INTERFACE)
  add_library(fl::${COMPONENT}_internal ALIAS fl_${COMPONENT}_internal)
  target_include_directories(fl_${COMPONENT}_internal INTERFACE $<BUILD_INTERFACE:${root}>)
endfunction()

# The component a source folder belongs to: the first folder of its path in the repository.
function(fl_component_of DIR OUT)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${DIR})
  string(REGEX REPLACE "/.*$" "" component "${rel}")
  set(${OUT} ${component} PARENT_SCOPE)
endfunction()

# fl_library(NAME SRCS ... DEPS ... [PUBLIC_INCLUDE dir] [INSTALL])
# Makes the static library fl_<NAME> with the alias fl::<NAME>, compiled with the project's warnings.
# INSTALL: installed with its public headers and exported as fl::<NAME> in the fl config package.
function(fl_library NAME)
  cmake_parse_arguments(ARG "INSTALL" "PUBLIC_INCLUDE" "SRCS;DEPS;PRIVATE_DEPS;INTERNAL" ${ARGN})
  add_library(fl_${NAME} STATIC ${ARG_SRCS})
  add_library(fl::${NAME} ALIAS fl_${NAME})
  if(ARG_PUBLIC_INCLUDE)
    target_include_directories(fl_${NAME} PUBLIC
      $<BUILD_INTERFACE:${ARG_PUBLIC_INCLUDE}> $<INSTALL_INTERFACE:include>)
  endif()
  # Its own component's internal headers, and those of the components named in INTERNAL (a
  # folder, not a link: an installed library exports no internal target).
  fl_component_of(${CMAKE_CURRENT_SOURCE_DIR} component)
  foreach(c IN LISTS component ARG_INTERNAL)
    target_include_directories(fl_${NAME} PRIVATE
      $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/internal_include/${c}>)
  endforeach()
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
  # Tests look inside every component (white-box), and include their own helpers as tests/...
  target_link_libraries(${NAME} PRIVATE ${FL_ALL_INTERNAL})
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
