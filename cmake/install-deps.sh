#!/usr/bin/env bash
# Install retexo's dependencies on Debian 12 (bookworm) with apt-get; a no-op when everything
# is already installed.  Runs apt-get through sudo when not root.
#   cmake/install-deps.sh            # what the library and the tools need to build and run
#   cmake/install-deps.sh --test     # and what the test suite needs (Catch2, Slurm, Doxygen, ...)
#   cmake/install-deps.sh --perf     # and what perf/run_all.sh needs (plots, the PyTorch peer)
#   cmake/install-deps.sh --golden   # and what test/golden reads HDF5 with
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libopenmpi-dev openmpi-bin
  libeigen3-dev
  libdnnl-dev ocl-icd-opencl-dev        # Debian's dnnl-config.cmake needs OpenCL
  libboost-program-options-dev
  libhdf5-openmpi-dev zlib1g-dev
  libmetis-dev nlohmann-json3-dev
  libptscotch-dev                       # the distributed partitioner (64-bit build: scotch-int64)
)
tests=(
  catch2
  python3 python3-h5py                  # tests compare metrics files, damage HDF5 files; perf/ reports
  slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins  # test/cluster: Slurm on this host
  iproute2                              # mpi_scripts/local_cluster.sh: hosts as network namespaces
  doxygen                               # the API reference (docs target, api_docs test)
)

case ${1:-} in
  "") ;;
  --test) packages+=("${tests[@]}") ;;
  --perf) packages+=("${tests[@]}" python3-matplotlib python3-torch python3-h5py time) ;;  # time: perf/mem_limit.sh
  --golden) packages+=(python3 python3-h5py) ;;
  *) echo "usage: $0 [--test|--perf|--golden]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "retexo: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "retexo: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
