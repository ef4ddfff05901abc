# METIS ships neither a CMake config nor a pkg-config file on Debian: find it by hand and
# wrap it in an imported target retexo::metis.
find_path(METIS_INCLUDE_DIR metis.h)
find_library(METIS_LIBRARY metis)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(METIS REQUIRED_VARS METIS_LIBRARY METIS_INCLUDE_DIR)
if(METIS_FOUND AND NOT TARGET retexo::metis)
  add_library(retexo::metis UNKNOWN IMPORTED)
  set_target_properties(retexo::metis PROPERTIES
    IMPORTED_LOCATION "${METIS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${METIS_INCLUDE_DIR}")
endif()
