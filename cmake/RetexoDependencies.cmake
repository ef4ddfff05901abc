# Every dependency of retexo, found through CMake (checked names: ../shared/ECOSYSTEM.md).
find_package(MPI 3.1 REQUIRED COMPONENTS C CXX)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
# Debian's dnnl-config.cmake needs OpenCL (ocl-icd-opencl-dev) even for CPU use.
find_package(dnnl 2.6 CONFIG REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "retexo needs parallel HDF5 (Debian: libhdf5-openmpi-dev)")
endif()
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
include(FindMETIS)
# PT-Scotch (64-bit build) for the distributed partitioner: retexo::ptscotch, with an rpath to
# its library folder (see cmake/FindPTScotch.cmake).
find_package(PTScotch REQUIRED)
