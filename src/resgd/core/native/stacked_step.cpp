// One evaluation of a stack of GD runs (forward, loss, hand-derived backward, flat gradients and
// their norms) in C++: resgd.core.stacked's _forward, _loss_and_output_grad and _backward, op for
// op. Every call below is the ATen function the Python code calls, with the same arguments, the
// same output buffers and in the same order, so every number is bit for bit the Python path's
// (tests/test_native_step.py); what goes is Python's per-operation cost (about 0.5 ms of a 1.8 ms
// step at the map's Jena N = 16, L = 1). ReLU only; other activations take the Python path.
#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

namespace {

using at::Tensor;

struct StackedStep : torch::CustomClassHolder {
  // n_layers, d_qk, m, folded (d_qk > d), mean pooling, "mean" reduction, and the logits' divisor
  int64_t L, q, m;
  bool folded, mean_pool, mean_reduction;
  double divisor;
  std::map<std::string, Tensor> store;  // buffers kept from call to call, by name (resgd.core.stacked._Buffers)

  StackedStep(int64_t n_layers, int64_t d_qk, int64_t m_, bool folded_, bool mean_pool_, bool mean_reduction_,
              double divisor_)
      : L(n_layers), q(d_qk), m(m_), folded(folded_), mean_pool(mean_pool_), mean_reduction(mean_reduction_),
        divisor(divisor_) {}

  Tensor& buf(const std::string& key, at::IntArrayRef shape, const at::TensorOptions& opt) {
    Tensor& t = store[key];
    if (!t.defined() || t.sizes() != shape) t = at::empty(shape, opt);
    return t;
  }

  static std::string layer_key(const char* name, int64_t layer) { return std::string(name) + "/" + std::to_string(layer); }

  // _bmm: a stack of one with a one-column b goes through the batched kernel as a stack of two
  static Tensor bmm1(const Tensor& a, const Tensor& b) {
    if (a.size(0) != 1 || b.size(-1) != 1) return at::bmm(a, b);
    return at::bmm(a.repeat({2, 1, 1}), b.repeat({2, 1, 1})).slice(0, 0, 1);
  }

  static Tensor pool(const Tensor& H, const c10::optional<Tensor>& mask) {
    if (!mask.has_value()) return H.mean(at::IntArrayRef{2});
    const Tensor& mk = *mask;
    int64_t N = mk.size(0), n = mk.size(1);
    Tensor w = mk.to(H.scalar_type());
    return (H * w.view({1, N, n, 1})).sum(at::IntArrayRef{2}) / w.sum(at::IntArrayRef{1}, true).view({1, N, 1});
  }

  // {loss (R,), flat gradients (R, P), ‖∇Φ‖ (R,) in float64, the first layer's Z (R, N, n, d)}
  std::vector<Tensor> evaluate(std::vector<Tensor> weights, Tensor beta, Tensor beta_ffn, Tensor X,
                               c10::optional<Tensor> mask, Tensor Y, int64_t n_params) {
    const int64_t R = weights[0].size(0);
    const int64_t N = X.size(-3), n = X.size(-2), d = X.size(-1), T = N * n;
    const auto opt = X.options();
    // ---- forward (_forward) ----
    c10::optional<Tensor> keypad;
    if (mask.has_value()) keypad = mask->view({1, N, 1, n}).bitwise_not();
    Tensor b4 = beta.view({R, 1, 1, 1}), bf4 = beta_ffn.view({R, 1, 1, 1});
    Tensor H = X;  // (R, N, n, d): train_stacked passes every run's copy
    Tensor Z0;
    struct Saved { Tensor X2, QK0, QK1, A, V, Z2, P, G; };
    std::vector<Saved> saved;
    saved.reserve(L);
    for (int64_t layer = 0; layer < L; ++layer) {
      const Tensor &W_Q = weights[5 * layer], &W_K = weights[5 * layer + 1], &W_V = weights[5 * layer + 2],
                   &W_1 = weights[5 * layer + 3], &W_2 = weights[5 * layer + 4];
      Tensor X2 = H.reshape({R, T, d});
      Tensor Xs = X2.reshape({R * N, n, d});
      Tensor S, qk0, qk1;
      if (folded) {
        Tensor M = at::bmm_out(buf(layer_key("M", layer), {R, d, d}, opt), W_Q, W_K.transpose(1, 2));
        Tensor XM = at::bmm_out(buf(layer_key("XM", layer), {R, T, d}, opt), X2, M).view({R * N, n, d});
        S = at::bmm_out(buf("S", {R * N, n, n}, opt), XM, Xs.transpose(1, 2)).div_(divisor);
        qk0 = XM; qk1 = M;
      } else {
        Tensor Q = at::bmm_out(buf(layer_key("Q", layer), {R, T, q}, opt), X2, W_Q).view({R * N, n, q});
        Tensor K = at::bmm_out(buf(layer_key("K", layer), {R, T, q}, opt), X2, W_K).view({R * N, n, q});
        S = at::bmm_out(buf("S", {R * N, n, n}, opt), Q, K.transpose(1, 2)).div_(divisor);
        qk0 = Q; qk1 = K;
      }
      if (keypad.has_value()) S.view({R, N, n, n}).masked_fill_(*keypad, -std::numeric_limits<double>::infinity());
      Tensor A = at::_softmax_out(buf(layer_key("A", layer), {R * N, n, n}, opt), S, -1, false);
      Tensor V = at::bmm_out(buf(layer_key("V", layer), {R, T, d}, opt), X2, W_V).view({R * N, n, d});
      Tensor Z = at::mul_out(buf(layer_key("Z", layer), {R, N, n, d}, opt), H, b4);
      Z.add_(at::bmm_out(buf("AV", {R * N, n, d}, opt), A, V).view({R, N, n, d}));
      if (layer == 0) Z0 = Z;
      Tensor Z2 = Z.view({R, T, d});
      Tensor P = at::bmm_out(buf(layer_key("P", layer), {R, T, m}, opt), Z2, W_1);
      Tensor G = at::clamp_min_out(buf(layer_key("G", layer), {R, T, m}, opt), P, 0);
      H = at::mul_out(buf(layer_key("H", layer), {R, N, n, d}, opt), Z, bf4);
      H.add_(at::bmm_out(buf("GW2", {R, T, d}, opt), G, W_2).view({R, N, n, d}));
      saved.push_back({X2, qk0, qk1, A, V, Z2, P, G});
    }
    const Tensor& W_U = weights[5 * L];
    Tensor Y_hat, read;
    if (mean_pool) {
      read = pool(H, mask);
      Y_hat = bmm1(read, W_U);
    } else {
      read = H;
      Y_hat = bmm1(H.reshape({R, T, d}), W_U).view({R, N, n, -1});
    }
    // ---- loss and ∂Φ/∂Ŷ (_loss_and_output_grad) ----
    Tensor residual = Y_hat - Y.unsqueeze(0);
    if (mask.has_value() && residual.dim() == 4)
      residual = residual * mask->unsqueeze(0).unsqueeze(-1).to(residual.scalar_type());
    Tensor loss = at::mul(residual.pow(2).flatten(1).sum(at::IntArrayRef{1}), 0.5);
    Tensor dY = residual;
    if (mean_reduction) {
      loss = loss / Y.size(0);
      dY = residual / Y.size(0);
    }
    // ---- backward (_backward) ----
    std::vector<Tensor> grads(weights.size());
    Tensor dH;
    if (mean_pool) {
      grads[5 * L] = at::bmm(read.transpose(1, 2), dY);
      Tensor dpool = at::bmm(dY, W_U.transpose(1, 2));
      if (!mask.has_value()) {
        dH = (dpool / n).unsqueeze(2).expand({R, N, n, d});
      } else {
        Tensor w = mask->to(H.scalar_type());
        dH = at::mul_out(buf("dH", {R, N, n, d}, opt), dpool.unsqueeze(2), (w / w.sum(at::IntArrayRef{1}, true)).view({1, N, n, 1}));
      }
    } else {
      Tensor dY2 = dY.reshape({R, T, -1});
      grads[5 * L] = at::bmm(H.reshape({R, T, d}).transpose(1, 2), dY2);
      dH = at::bmm_out(buf("dH", {R, T, d}, opt), dY2, W_U.transpose(1, 2)).view({R, N, n, d});
    }
    Tensor b3 = beta.view({R, 1, 1}), bf3 = beta_ffn.view({R, 1, 1});
    for (int64_t layer = L - 1; layer >= 0; --layer) {
      const Tensor &W_Q = weights[5 * layer], &W_K = weights[5 * layer + 1], &W_V = weights[5 * layer + 2],
                   &W_1 = weights[5 * layer + 3], &W_2 = weights[5 * layer + 4];
      const Saved& sv = saved[layer];
      Tensor dH2 = dH.reshape({R, T, d});
      grads[5 * layer + 4] = at::bmm_out(buf(layer_key("dW_2", layer), {R, m, d}, opt), sv.G.transpose(1, 2), dH2);
      Tensor dG = at::bmm_out(buf("dG", {R, T, m}, opt), dH2, W_2.transpose(1, 2));
      Tensor dP = at::threshold_backward_out(buf("dP", {R, T, m}, opt), dG, sv.P, 0);
      grads[5 * layer + 3] = at::bmm_out(buf(layer_key("dW_1", layer), {R, d, m}, opt), sv.Z2.transpose(1, 2), dP);
      Tensor dZ = at::mul_out(buf("dZ", {R, T, d}, opt), dH2, bf3);
      dZ.baddbmm_(dP, W_1.transpose(1, 2));
      Tensor dattn = dZ.view({R * N, n, d});
      Tensor dA = at::bmm_out(buf("dA", {R * N, n, n}, opt), dattn, sv.V.transpose(1, 2));
      Tensor dV = at::bmm_out(buf("dV", {R * N, n, d}, opt), sv.A.transpose(1, 2), dattn).view({R, T, d});
      grads[5 * layer + 2] = at::bmm_out(buf(layer_key("dW_V", layer), {R, d, d}, opt), sv.X2.transpose(1, 2), dV);
      Tensor rowsum = at::sum_out(buf("rowsum", {R * N, n, 1}, opt),
                                  at::mul_out(buf("dA*A", {R * N, n, n}, opt), dA, sv.A), {-1}, true);
      Tensor dS = dA.sub_(rowsum).mul_(sv.A).div_(divisor);
      Tensor Xs = sv.X2.reshape({R * N, n, d});
      Tensor dXM, dQ, dK;
      if (folded) {
        const Tensor &XM = sv.QK0, &M = sv.QK1;
        dXM = at::bmm_out(buf("dXM", {R * N, n, d}, opt), dS, Xs);
        Tensor dM = at::bmm_out(buf("dM", {R, d, d}, opt), sv.X2.transpose(1, 2), dXM.view({R, T, d}));
        grads[5 * layer] = at::bmm_out(buf(layer_key("dW_Q", layer), {R, d, q}, opt), dM, W_K);
        grads[5 * layer + 1] = at::bmm_out(buf(layer_key("dW_K", layer), {R, d, q}, opt), dM.transpose(1, 2), W_Q);
      } else {
        const Tensor &Q = sv.QK0, &K = sv.QK1;
        dQ = at::bmm_out(buf("dQ", {R * N, n, q}, opt), dS, K).view({R, T, -1});
        dK = at::bmm_out(buf("dK", {R * N, n, q}, opt), dS.transpose(1, 2), Q).view({R, T, -1});
        grads[5 * layer] = at::bmm_out(buf(layer_key("dW_Q", layer), {R, d, q}, opt), sv.X2.transpose(1, 2), dQ);
        grads[5 * layer + 1] = at::bmm_out(buf(layer_key("dW_K", layer), {R, d, q}, opt), sv.X2.transpose(1, 2), dK);
      }
      if (layer == 0) break;  // nobody needs ∂Φ/∂X of the input
      Tensor dX = at::mul_out(buf(layer_key("dX", layer % 2), {R, T, d}, opt), dZ, b3);
      dX.baddbmm_(dV, W_V.transpose(1, 2));
      if (folded) {
        const Tensor &XM = sv.QK0, &M = sv.QK1;
        dX.add_(at::bmm_out(buf("dXM Mt", {R, T, d}, opt), dXM.view({R, T, d}), M.transpose(1, 2)));
        dX.add_(at::bmm_out(buf("dSt XM", {R * N, n, d}, opt), dS.transpose(1, 2), XM).view({R, T, d}));
      } else {
        dX.baddbmm_(dQ, W_Q.transpose(1, 2)).baddbmm_(dK, W_K.transpose(1, 2));
      }
      dH = dX.view({R, N, n, d});
    }
    std::vector<Tensor> rows;
    rows.reserve(grads.size());
    for (const Tensor& g : grads) rows.push_back(g.reshape({R, -1}));
    Tensor flat = at::cat_out(buf("flat", {R, n_params}, opt), rows, 1);
    Tensor norms = at::linalg_vector_norm(flat.to(at::kDouble), 2, at::IntArrayRef{1});
    return {loss.to(at::kDouble), flat, norms, Z0};
  }
};

}  // namespace

TORCH_LIBRARY(resgd_native, lib) {
  lib.class_<StackedStep>("StackedStep")
      .def(torch::init<int64_t, int64_t, int64_t, bool, bool, bool, double>())
      .def("evaluate", &StackedStep::evaluate);
}
