# PT-Scotch with a 64-bit SCOTCH_Num, wrapped in the imported target retexo::ptscotch.
#
# Debian's libptscotch-dev installs three builds side by side that share their sonames: the
# default (/usr/include/scotch, 32-bit SCOTCH_Num, libraries directly in the multiarch
# directory), scotch-int32, scotch-int64 and scotch-long (include/<variant>, lib/<arch>/<variant>).
# retexo uses scotch-int64.  Because the sonames are the same, a binary linked against the
# scotch-int64 libraries must find them at run time before the default 32-bit ones: the
# target carries a linker rpath to their folder (INTERFACE_LINK_OPTIONS), which reaches every
# binary that links it, directly or through a static libretexo, in the build tree, the
# installed tree and in projects that use the installed retexo package.
#
# Hints: PTSCOTCH_ROOT (CMake or environment variable), or set PTSCOTCH_INCLUDE_DIR and
# PTSCOTCH_LIBRARY_DIR.  Sets PTScotch_FOUND, PTSCOTCH_INCLUDE_DIR, PTSCOTCH_LIBRARY_DIR,
# PTSCOTCH_LIBRARIES.
set(_retexo_ptscotch_roots ${PTSCOTCH_ROOT} $ENV{PTSCOTCH_ROOT})
find_path(PTSCOTCH_INCLUDE_DIR ptscotch.h HINTS ${_retexo_ptscotch_roots} PATH_SUFFIXES include/scotch-int64
          scotch-int64 DOC "Directory of ptscotch.h (64-bit SCOTCH_Num)")
find_library(PTSCOTCH_LIBRARY ptscotch HINTS ${_retexo_ptscotch_roots}
             PATH_SUFFIXES lib/scotch-int64 lib/${CMAKE_LIBRARY_ARCHITECTURE}/scotch-int64 scotch-int64
             DOC "libptscotch (64-bit SCOTCH_Num)")
mark_as_advanced(PTSCOTCH_INCLUDE_DIR PTSCOTCH_LIBRARY)

set(_retexo_ptscotch_error "")
set(PTSCOTCH_LIBRARIES)
if(PTSCOTCH_INCLUDE_DIR AND PTSCOTCH_LIBRARY)
  # The header must declare a 64-bit SCOTCH_Num: the default Debian scotch.h is 32-bit.
  file(STRINGS "${PTSCOTCH_INCLUDE_DIR}/scotch.h" _retexo_ptscotch_num REGEX "^typedef .* SCOTCH_Num;")
  if(NOT _retexo_ptscotch_num MATCHES "int64_t|long long|long")
    set(_retexo_ptscotch_error "${PTSCOTCH_INCLUDE_DIR}/scotch.h declares '${_retexo_ptscotch_num}', "
                               "retexo needs a 64-bit SCOTCH_Num (Debian: /usr/include/scotch-int64)")
  endif()
  # The other libraries of the same build, from the same folder only.
  get_filename_component(PTSCOTCH_LIBRARY_DIR "${PTSCOTCH_LIBRARY}" DIRECTORY)
  set(PTSCOTCH_LIBRARIES "${PTSCOTCH_LIBRARY}")
  foreach(_retexo_lib ptscotcherr scotch scotcherr)
    find_library(PTSCOTCH_${_retexo_lib}_LIBRARY ${_retexo_lib} PATHS "${PTSCOTCH_LIBRARY_DIR}" NO_DEFAULT_PATH)
    mark_as_advanced(PTSCOTCH_${_retexo_lib}_LIBRARY)
    if(NOT PTSCOTCH_${_retexo_lib}_LIBRARY)
      set(_retexo_ptscotch_error "lib${_retexo_lib} is missing from ${PTSCOTCH_LIBRARY_DIR}")
    endif()
    list(APPEND PTSCOTCH_LIBRARIES "${PTSCOTCH_${_retexo_lib}_LIBRARY}")
  endforeach()
endif()

include(FindPackageHandleStandardArgs)
if(_retexo_ptscotch_error)
  set(PTScotch_FOUND FALSE)
  if(PTScotch_FIND_REQUIRED)
    message(FATAL_ERROR "retexo: ${_retexo_ptscotch_error}")
  endif()
  set(PTScotch_NOT_FOUND_MESSAGE "retexo: ${_retexo_ptscotch_error}")
else()
  find_package_handle_standard_args(PTScotch REQUIRED_VARS PTSCOTCH_LIBRARY PTSCOTCH_INCLUDE_DIR
                                    REASON_FAILURE_MESSAGE "Debian: apt-get install libptscotch-dev")
endif()
if(PTScotch_FOUND AND NOT TARGET retexo::ptscotch)
  add_library(retexo::ptscotch INTERFACE IMPORTED)
  set_target_properties(retexo::ptscotch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${PTSCOTCH_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${PTSCOTCH_LIBRARIES}"
    INTERFACE_LINK_OPTIONS "LINKER:-rpath,${PTSCOTCH_LIBRARY_DIR}")
endif()
