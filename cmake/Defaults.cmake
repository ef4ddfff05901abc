# retexo_generate_defaults(TABLE HEADER): retexo/defaults.hpp from data/defaults.cfg, the one
# table of defaults.  Every `key = value` line becomes a constant of the value's type, named
# after the key (dashes become underscores), and its text verbatim:
#   weight-decay = 5e-4              inline constexpr double weight_decay = 5e-4;
#                                    inline constexpr std::string_view weight_decay_text = "5e-4";
#   stages = 3                       int
#   normalize-features = false       bool
#   optimizer = adam                 std::string_view (a name; names_of's table turns it into the enum)
#   smooth-alpha = 0,0.5,0.8,0.9     std::array<double, 4>
#   search-norm = none,layer         std::array<std::string_view, 2> (names)
# A line that is none of these stops the configuration with its file and line number.
function(retexo_generate_defaults table header)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${table})
  file(STRINGS ${table} lines)
  set(number "-?[0-9]+(\\.[0-9]*)?([eE][-+]?[0-9]+)?")
  set(body "")
  set(line_no 0)
  foreach(line IN LISTS lines)
    math(EXPR line_no "${line_no} + 1")
    string(REGEX REPLACE "#.*" "" line "${line}")
    string(STRIP "${line}" line)
    if(line STREQUAL "")
      continue()
    endif()
    if(NOT line MATCHES "^([a-z][a-z0-9-]*)[ \t]*=[ \t]*([^ \t].*)$")
      message(FATAL_ERROR "${table}:${line_no}: expected 'key = value', got '${line}'")
    endif()
    set(key "${CMAKE_MATCH_1}")
    set(value "${CMAKE_MATCH_2}")
    string(REPLACE "-" "_" name "${key}")
    string(REGEX MATCHALL "," commas "${value}")
    list(LENGTH commas count)
    math(EXPR count "${count} + 1") # the items of a list
    if(value MATCHES "^(true|false)$")
      set(decl "bool ${name} = ${value}")
    elseif(value MATCHES "^-?[0-9]+$")
      set(decl "int ${name} = ${value}")
    elseif(value MATCHES "^${number}$")
      set(decl "double ${name} = ${value}")
    elseif(value MATCHES "^${number}(,${number})+$")
      string(REPLACE "," ", " items "${value}")
      set(decl "std::array<double, ${count}> ${name} = {${items}}")
    elseif(value MATCHES "^[a-z][a-z0-9-]*$")
      set(decl "std::string_view ${name} = \"${value}\"")
    elseif(value MATCHES "^[a-z][a-z0-9-]*(,[a-z][a-z0-9-]*)+$")
      string(REPLACE "," "\", \"" items "${value}")
      set(decl "std::array<std::string_view, ${count}> ${name} = {\"${items}\"}")
    else()
      message(FATAL_ERROR "${table}:${line_no}: '${value}' is not a number, true, false, a name or a list of numbers or names")
    endif()
    string(APPEND body "inline constexpr ${decl}; ///< ${key} = ${value}\n"
                       "inline constexpr std::string_view ${name}_text = \"${value}\"; ///< ${key}, as written\n")
  endforeach()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/defaults.hpp.in ${header} @ONLY)
endfunction()
