# The defaults-table generator (cmake/Defaults.cmake) on small tables, good and bad:
#   cmake -DSRC=<source dir> -DWORK=<scratch dir> -P defaults_table_test.cmake
# A good table's header has the constants, the per-model lookup and the models' list; a bad
# one stops the generator with the table's name, the line and the problem.
cmake_minimum_required(VERSION 3.25)
set(dir ${WORK}/defaults_table_test)
file(REMOVE_RECURSE ${dir})
file(MAKE_DIRECTORY ${dir})
file(WRITE ${dir}/generate.cmake
     "cmake_minimum_required(VERSION 3.25)\n"
     "set(PROJECT_SOURCE_DIR ${SRC})\n"
     "include(${SRC}/cmake/Defaults.cmake)\n"
     "retexo_generate_defaults(\${TABLE} \${HEADER})\n")
set(failures 0)

# expect(NAME TABLE_TEXT SHOULD_PASS REGEX...): each REGEX found in the header (a good table)
# or in the generator's error (a bad one).
function(expect name text pass)
  file(WRITE ${dir}/${name}.cfg "${text}")
  execute_process(COMMAND ${CMAKE_COMMAND} -DTABLE=${dir}/${name}.cfg -DHEADER=${dir}/${name}.hpp
                          -P ${dir}/generate.cmake
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "[ \t\r\n]+" " " err "${err}") # CMake wraps its messages
  set(ok TRUE)
  if(pass AND NOT rc EQUAL 0)
    set(ok FALSE)
  elseif(NOT pass AND rc EQUAL 0)
    set(ok FALSE)
  endif()
  set(seen "${err}")
  if(pass AND ok)
    file(READ ${dir}/${name}.hpp seen)
  endif()
  foreach(regex IN LISTS ARGN)
    if(NOT seen MATCHES "${regex}")
      set(ok FALSE)
      message("  missing: ${regex}")
    endif()
  endforeach()
  if(ok)
    message("ok: ${name}")
  else()
    message("FAIL: ${name} (exit ${rc}): ${err}")
    math(EXPR failures "${failures} + 1")
    set(failures ${failures} PARENT_SCOPE)
  endif()
endfunction()

expect(good "lr = 0.01\nsearch-norm = none # a comment\n\n[gcn]\nsearch-norm = none,layer\n[sage]\nlr = 0.1\n" TRUE
       "std::array<std::string_view, 1> search_norm = {\"none\"}"
       "std::array<std::string_view, 2> gcn_search_norm = {\"none\", \"layer\"}; ///< \\[gcn\\] search-norm"
       "std::array<double, 1> lr = {0.01}"
       "if \\(model == \"sage\"\\) return sage_lr;"
       "search_norm_by_model_text = \"none; gcn: none,layer\""
       "models = {\"gcn\", \"sage\"}")
expect(no_sections "lr = 0.01\nstages = 3\n" TRUE "double lr = 0.01;" "int stages = 3;"
       "std::array<std::string_view, 0> models = {}")
expect(section_key_unknown "lr = 0.01\n[gcn]\nsearch-norm = none,layer\n" FALSE
       "section_key_unknown.cfg:3: \\[gcn\\] sets search-norm, which no line before the sections sets")
expect(section_twice "lr = 0.01\n[gcn]\nlr = 0.1\n[gcn]\n" FALSE "section \\[gcn\\] given twice")
expect(bad_section "lr = 0.01\n[gcn\n" FALSE "bad_section.cfg:2: expected 'key = value' or '\\[model\\]', got '\\[gcn'")
expect(other_kind "search-norm = none\n[gat]\nsearch-norm = 1,2\n" FALSE
       "\\[gat\\] search-norm is not a list of the same kind as search-norm")
expect(bad_value "lr = 0.01\n[gcn]\nlr = fast?\n" FALSE "bad_value.cfg:3: 'fast\\?' is not a list of numbers or of names")

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} defaults-table case(s) failed")
endif()
