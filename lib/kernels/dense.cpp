#include <retexo/kernels/dense.hpp>
#include <retexo/kernels/optim.hpp>

namespace retexo {

activation parse_activation(const std::string& name)
{
    if (name == "none") return activation::none;
    if (name == "relu") return activation::relu;
    if (name == "leaky_relu") return activation::leaky_relu;
    if (name == "elu") return activation::elu;
    RETEXO_THROW("unknown activation '" << name << "' (expected none, relu, leaky_relu or elu)");
}

optimizer_kind parse_optimizer(const std::string& name)
{
    if (name == "adam") return optimizer_kind::adam;
    if (name == "adamw") return optimizer_kind::adamw;
    if (name == "sgd") return optimizer_kind::sgd;
    RETEXO_THROW("unknown optimizer '" << name << "' (expected adam, adamw or sgd)");
}

std::string to_string(optimizer_kind k)
{
    switch (k) {
    case optimizer_kind::adam:
        return "adam";
    case optimizer_kind::adamw:
        return "adamw";
    case optimizer_kind::sgd:
        return "sgd";
    }
    return "?";
}

template class optimizer<float>;
template class optimizer<double>;

} // namespace retexo
