// One evaluation of a stack of GD runs (forward, loss, hand-derived backward, flat gradients and
// their norms) in C++: resgd.core.stacked's _forward, _loss_and_output_grad and _backward, op for
// op. Every call below is the ATen function the Python code calls, with the same arguments and in
// the same order (the ReLU and its backward in place, where Python writes new buffers), so every
// number is bit for bit the Python path's (tests/test_native_step.py); what goes is Python's
// per-operation cost (about 0.5 ms of a 1.8 ms step at the map's Jena N = 16, L = 1). ReLU only;
// other activations take the Python path.
//
// Two row kernels replace ATen calls where ATen is slow on the map's rows of 8 keys: the softmax
// (~140 ns a row in ATen, for its lane-by-lane reductions through memory) and the softmax's
// backward (five passes). Each does ATen's arithmetic in ATen's order (the same SLEEF exp, the
// same summation order) and is used only after a check on this CPU, on rows of every length up
// to 32 with -inf and NaN entries, found it bit for bit equal to ATen's (row_kernels()).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorIndexing.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

extern "C" {  // SLEEF's exp, as ATen's Vectorized<double>::exp calls it (exported by libtorch_cpu)
__m512d Sleef_expd8_u10(__m512d);
__m256d Sleef_expd4_u10(__m256d);
}

namespace {

// ---- row kernels (double, contiguous rows of D <= MAX_ROW) ----

constexpr int64_t MAX_ROW = 32;  // the longest row the check below covers

// exp in place, in vectors of 8 (AVX-512) or 4 (AVX2) lanes; lanes are independent, so any
// grouping of the elements gives ATen's results
__attribute__((target("avx512f"))) void exp_lanes8(double* y, int64_t count) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) _mm512_storeu_pd(y + i, Sleef_expd8_u10(_mm512_loadu_pd(y + i)));
  if (i == count) return;
  alignas(64) double tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::copy(y + i, y + count, tail);
  _mm512_store_pd(tail, Sleef_expd8_u10(_mm512_load_pd(tail)));
  std::copy(tail, tail + (count - i), y + i);
}

__attribute__((target("avx2,fma"))) void exp_lanes4(double* y, int64_t count) {
  int64_t i = 0;
  for (; i + 4 <= count; i += 4) _mm256_storeu_pd(y + i, Sleef_expd4_u10(_mm256_loadu_pd(y + i)));
  if (i == count) return;
  alignas(32) double tail[4] = {0, 0, 0, 0};
  std::copy(y + i, y + count, tail);
  _mm256_store_pd(tail, Sleef_expd4_u10(_mm256_load_pd(tail)));
  std::copy(tail, tail + (count - i), y + i);
}

// A row's sum in the order of ATen's softmax (reduce_all over vectors of W lanes): lane j sums
// elements j, j + W, ... (a last partial group adds into the first lanes), then the lanes are
// added left to right; a row shorter than W is added left to right.
double vector_lane_sum(const double* y, int64_t D, int W) {
  double s = y[0];
  if (D < W) {
    for (int64_t j = 1; j < D; ++j) s += y[j];
    return s;
  }
  double acc[8];
  std::copy(y, y + W, acc);
  int64_t k = W;
  for (; k + W <= D; k += W)
    for (int j = 0; j < W; ++j) acc[j] += y[k + j];
  for (int64_t j = 0; k + j < D; ++j) acc[j] += y[k + j];
  s = acc[0];
  for (int j = 1; j < W; ++j) s += acc[j];
  return s;
}

// A row's sum in the order of ATen's sum over a last dimension of up to 32 (its AVX2 kernel, on
// AVX-512 CPUs too, or its default one; both in vectors of 4 lanes), signed zeros included:
// vectors of 4 summed lane by lane into 4 partials from zero (vector i into partial i mod 4 for
// the whole groups of 4 vectors, the rest into partial 0), the partials added into the first;
// then from zero the elements past the last whole vector, then its 4 lanes, left to right
double aten_sum(const double* y, int64_t D) {
  double final_sum = 0.0;
  if (D < 4) {  // ATen's scalar loop: four partials from zero, every element into the first
    for (int64_t j = 0; j < D; ++j) final_sum += y[j];
    for (int k = 1; k < 4; ++k) final_sum += 0.0;
    return 0.0 + final_sum;
  }
  const int64_t vectors = D / 4, whole = vectors / 4 * 4;
  double partial[4][4] = {};
  for (int64_t i = 0; i < whole; ++i)
    for (int l = 0; l < 4; ++l) partial[i % 4][l] += y[4 * i + l];
  for (int64_t i = whole; i < vectors; ++i)
    for (int l = 0; l < 4; ++l) partial[0][l] += y[4 * i + l];
  for (int k = 1; k < 4; ++k)
    for (int l = 0; l < 4; ++l) partial[0][l] += partial[k][l];
  for (int64_t j = 4 * vectors; j < D; ++j) final_sum += y[j];
  for (int l = 0; l < 4; ++l) final_sum += partial[0][l];
  return 0.0 + final_sum;  // the output starts at zero and the sum is added to it
}

// y = softmax(x / divisor) over rows of D, keys where keep is false at -inf (keep: (samples, D),
// row r of sample (r / D) mod samples; null: every key): exp(s - max) / sum, the sum in vectors of
// W lanes (8 or 4). The division and the -inf are the Python path's div_ and masked_fill_.
void softmax_rows(const double* x, double* y, int64_t rows, int64_t D, int W, double divisor = 1.0,
                  const bool* keep = nullptr, int64_t samples = 1) {
  constexpr int64_t BLOCK = 256;  // rows per exp call: 16 KB at D = 8, in L1
  constexpr double minus_inf = -std::numeric_limits<double>::infinity();
  for (int64_t r0 = 0; r0 < rows; r0 += BLOCK) {
    const int64_t r1 = std::min(rows, r0 + BLOCK);
    for (int64_t r = r0; r < r1; ++r) {
      const double* xr = x + r * D;
      double* yr = y + r * D;
      const bool* kr = keep ? keep + ((r / D) % samples) * D : nullptr;
      for (int64_t j = 0; j < D; ++j) yr[j] = (kr && !kr[j]) ? minus_inf : xr[j] / divisor;
      double top = yr[0];
      bool nan = std::isnan(top);
      for (int64_t j = 1; j < D; ++j) {
        top = yr[j] > top ? yr[j] : top;
        nan |= std::isnan(yr[j]);
      }
      if (nan) top = std::numeric_limits<double>::quiet_NaN();  // ATen's maximum propagates NaN
      for (int64_t j = 0; j < D; ++j) yr[j] -= top;
    }
    if (W == 8) exp_lanes8(y + r0 * D, (r1 - r0) * D);
    else exp_lanes4(y + r0 * D, (r1 - r0) * D);
    for (int64_t r = r0; r < r1; ++r) {
      double* yr = y + r * D;
      const double inverse = 1 / vector_lane_sum(yr, D, W);
      for (int64_t j = 0; j < D; ++j) yr[j] *= inverse;
    }
  }
}

// dS = (dA - rowsum(dA * A)) * A / divisor, in place into dA (the Python path's mul, sum, sub_,
// mul_ and div_, each rounded as there)
void softmax_backward_rows(double* dA, const double* A, int64_t rows, int64_t D, double divisor) {
  double product[MAX_ROW];
  for (int64_t r = 0; r < rows; ++r) {
    double* g = dA + r * D;
    const double* a = A + r * D;
    for (int64_t j = 0; j < D; ++j) product[j] = g[j] * a[j];
    const double rowsum = aten_sum(product, D);
    for (int64_t j = 0; j < D; ++j) g[j] = ((g[j] - rowsum) * a[j]) / divisor;
  }
}

// equal bit for bit (so +0 is not -0), or both NaN
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return at::logical_or(at::eq(a.view(at::kLong), b.view(at::kLong)), at::logical_and(at::isnan(a), at::isnan(b)))
      .all()
      .item<bool>();
}

// Which row kernels equal ATen's on this CPU: rows of 1..MAX_ROW with values over 40 orders of
// magnitude, -inf entries, rows of -inf and a NaN, checked against at::_softmax and the Python
// path's backward calls
struct RowKernels {
  int softmax_width = 0;  // 0: ATen's softmax
  bool backward = false;  // false: ATen's five calls
  std::string why;
};

RowKernels check_row_kernels() {
  RowKernels k;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(20261204);
  std::vector<int> widths;
  if (__builtin_cpu_supports("avx512f")) widths.push_back(8);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) widths.push_back(4);
  bool softmax_ok = !widths.empty(), backward_ok = true;
  std::vector<bool> width_ok(widths.size(), true);
  for (int64_t D = 1; D <= MAX_ROW; ++D) {
    at::Tensor x = at::randn({512, D}, gen, at::kDouble) * at::exp(at::randn({512, D}, gen, at::kDouble) * 4);
    x.index_put_({at::indexing::Slice(0, c10::nullopt, 7), 0}, -std::numeric_limits<double>::infinity());
    x.index_put_({at::indexing::Slice(3, c10::nullopt, 11)}, -std::numeric_limits<double>::infinity());
    x.index_put_({5, D - 1}, std::numeric_limits<double>::quiet_NaN());
    at::Tensor ref = at::_softmax(x, -1, false);
    // as the step calls it: logits divided, padded keys (per sample of D queries) at -inf
    const int64_t samples = 512 / D;
    at::Tensor keep = at::rand({samples, D}, gen, at::kDouble).gt(0.3);
    at::Tensor xs = x.narrow(0, 0, samples * D).contiguous();
    at::Tensor ref_step = at::_softmax(
        xs.div(4.0).view({samples, D, D}).masked_fill_(keep.logical_not().view({samples, 1, D}),
                                                       -std::numeric_limits<double>::infinity()),
        -1, false).view({samples * D, D});
    for (size_t w = 0; w < widths.size(); ++w) {
      at::Tensor y = at::empty_like(x), ys = at::empty_like(xs);
      softmax_rows(x.data_ptr<double>(), y.data_ptr<double>(), x.size(0), D, widths[w]);
      softmax_rows(xs.data_ptr<double>(), ys.data_ptr<double>(), samples * D, D, widths[w], 4.0,
                   keep.data_ptr<bool>(), samples);
      width_ok[w] = width_ok[w] && same_bits(y, ref) && same_bits(ys, ref_step);
    }
    at::Tensor A = at::_softmax(at::randn({512, D}, gen, at::kDouble) * 3, -1, false);
    at::Tensor dA = at::randn({512, D}, gen, at::kDouble) * at::exp(at::randn({512, D}, gen, at::kDouble) * 4);
    const double divisor = std::sqrt(14.0);
    at::Tensor rowsum = at::sum(at::mul(dA, A), {-1}, true);
    at::Tensor expected = dA.clone().sub_(rowsum).mul_(A).div_(divisor);
    at::Tensor got = dA.clone();
    softmax_backward_rows(got.data_ptr<double>(), A.data_ptr<double>(), 512, D, divisor);
    backward_ok = backward_ok && same_bits(got, expected);
  }
  for (size_t w = 0; w < widths.size() && k.softmax_width == 0; ++w)
    if (width_ok[w]) k.softmax_width = widths[w];
  k.backward = backward_ok;
  k.why = std::string("softmax: ") +
          (k.softmax_width ? "row kernel, lanes of " + std::to_string(k.softmax_width)
                           : (softmax_ok ? "ATen's (no row kernel equals it here)" : "ATen's (no AVX2 or AVX-512)")) +
          "; softmax backward: " + (k.backward ? "row kernel" : "ATen's (the row kernel differs here)");
  return k;
}

const RowKernels& row_kernels() {
  static const RowKernels k = check_row_kernels();
  return k;
}

bool row_kernel_fits(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble && t.is_contiguous() && t.size(-1) <= MAX_ROW;
}


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
    Tensor keep;  // the mask as the row kernel reads it: (N, n), contiguous
    if (mask.has_value()) {
      keypad = mask->view({1, N, 1, n}).bitwise_not();
      keep = mask->to(at::kBool).contiguous();
    }
    Tensor b4 = beta.view({R, 1, 1, 1}), bf4 = beta_ffn.view({R, 1, 1, 1});
    Tensor H = X;  // (R, N, n, d): train_stacked passes every run's copy
    Tensor Z0;
    struct Saved { Tensor X2, QK0, QK1, A, V, Z2, G; };
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
        S = at::bmm_out(buf("S", {R * N, n, n}, opt), XM, Xs.transpose(1, 2));
        qk0 = XM; qk1 = M;
      } else {
        Tensor Q = at::bmm_out(buf(layer_key("Q", layer), {R, T, q}, opt), X2, W_Q).view({R * N, n, q});
        Tensor K = at::bmm_out(buf(layer_key("K", layer), {R, T, q}, opt), X2, W_K).view({R * N, n, q});
        S = at::bmm_out(buf("S", {R * N, n, n}, opt), Q, K.transpose(1, 2));
        qk0 = Q; qk1 = K;
      }
      Tensor A = buf(layer_key("A", layer), {R * N, n, n}, opt);
      if (row_kernels().softmax_width && row_kernel_fits(S)) {  // with the division and the mask
        softmax_rows(S.data_ptr<double>(), A.data_ptr<double>(), R * N * n, n, row_kernels().softmax_width, divisor,
                     keep.defined() ? keep.data_ptr<bool>() : nullptr, N);
      } else {
        S.div_(divisor);
        if (keypad.has_value()) S.view({R, N, n, n}).masked_fill_(*keypad, -std::numeric_limits<double>::infinity());
        at::_softmax_out(A, S, -1, false);
      }
      Tensor V = at::bmm_out(buf(layer_key("V", layer), {R, T, d}, opt), X2, W_V).view({R * N, n, d});
      Tensor Z = at::mul_out(buf(layer_key("Z", layer), {R, N, n, d}, opt), H, b4);
      Z.add_(at::bmm_out(buf("AV", {R * N, n, d}, opt), A, V).view({R, N, n, d}));
      if (layer == 0) Z0 = Z;
      Tensor Z2 = Z.view({R, T, d});
      // G = ReLU(P) in P's buffer: the backward's mask G > 0 is P > 0 (NaN stays NaN, so passes in
      // both), and one (R, T, m) tensor less stays in cache
      Tensor G = at::bmm_out(buf(layer_key("G", layer), {R, T, m}, opt), Z2, W_1).clamp_min_(0);
      H = at::mul_out(buf(layer_key("H", layer), {R, N, n, d}, opt), Z, bf4);
      H.add_(at::bmm_out(buf("GW2", {R, T, d}, opt), G, W_2).view({R, N, n, d}));
      saved.push_back({X2, qk0, qk1, A, V, Z2, G});
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
    // the weight gradients go to contiguous buffers, then cat into the flat (R, P) one, as in
    // Python: a bmm straight into a column block of flat (not contiguous) runs ATen's per-run loop
    // instead of MKL's batched call (Jena N = 16, L = 1's six products: 314-344 µs, not 240-248)
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
      Tensor dP = at::threshold_backward_out(dG, dG, sv.G, 0);  // in place: dG is not needed after
      grads[5 * layer + 3] = at::bmm_out(buf(layer_key("dW_1", layer), {R, d, m}, opt), sv.Z2.transpose(1, 2), dP);
      Tensor dZ = at::mul_out(buf("dZ", {R, T, d}, opt), dH2, bf3);
      dZ.baddbmm_(dP, W_1.transpose(1, 2));
      Tensor dattn = dZ.view({R * N, n, d});
      Tensor dA = at::bmm_out(buf("dA", {R * N, n, n}, opt), dattn, sv.V.transpose(1, 2));
      Tensor dV = at::bmm_out(buf("dV", {R * N, n, d}, opt), sv.A.transpose(1, 2), dattn).view({R, T, d});
      grads[5 * layer + 2] = at::bmm_out(buf(layer_key("dW_V", layer), {R, d, d}, opt), sv.X2.transpose(1, 2), dV);
      Tensor dS = dA;
      if (row_kernels().backward && row_kernel_fits(dA)) {
        softmax_backward_rows(dA.data_ptr<double>(), sv.A.data_ptr<double>(), R * N * n, n, divisor);
      } else {
        Tensor rowsum = at::sum_out(buf("rowsum", {R * N, n, 1}, opt),
                                    at::mul_out(buf("dA*A", {R * N, n, n}, opt), dA, sv.A), {-1}, true);
        dA.sub_(rowsum).mul_(sv.A).div_(divisor);
      }
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

std::string row_kernels_status() { return row_kernels().why; }

TORCH_LIBRARY(resgd_native, lib) {
  lib.def("row_kernels() -> str", &row_kernels_status);
  lib.class_<StackedStep>("StackedStep")
      .def(torch::init<int64_t, int64_t, int64_t, bool, bool, bool, double>())
      .def("evaluate", &StackedStep::evaluate);
}
