// The optimisers (Adam, AdamW, SGD) instantiated for float and double parameters.
#include <retexo/kernels/optim.hpp>

namespace retexo {

template class optimizer<float>;
template class optimizer<double>;

} // namespace retexo
