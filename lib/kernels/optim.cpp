#include <retexo/kernels/optim.hpp>

namespace retexo {

template class optimizer<float>;
template class optimizer<double>;

} // namespace retexo
