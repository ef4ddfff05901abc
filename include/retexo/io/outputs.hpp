#pragma once
/// @file outputs.hpp
/// Files a training run writes: the model (parameters, replicated on every rank, written by
/// rank 0) and the per-node predictions (every rank's rows, one parallel HDF5 file).  Both
/// appear only when complete.

#include <retexo/comm/communicator.hpp>
#include <retexo/graph/local_partition.hpp>

#include <string>
#include <vector>

namespace retexo {

/// Write a model file (rank 0 only; call on rank 0): every tensor as a dataset under
/// "parameters/", plus string attributes (configuration, versions).
void save_model(const std::string& path, const std::vector<named_tensor>& tensors,
                const std::vector<std::pair<std::string, std::string>>& attributes);

/// Read back the tensors of a model file, in the order of their names (not the order
/// saved): match them to a model's parameters by name.
std::vector<named_tensor> load_model(const std::string& path);

/// Write predictions of every node (collective): "prediction" int32 [N] (argmax of the
/// logits), "logits" float [N x C] and "embedding" float [N x E], row i = node i.  Rows
/// are first redistributed to contiguous blocks (one Alltoallv, counted as output traffic),
/// then each rank writes its block with MPI-IO.
void write_predictions(const mpi::communicator& comm, const std::string& path, const local_partition& part,
                       const matrix_f& logits, const matrix_f& embedding);

} // namespace retexo
