// Every tolerance of the acceptance ladder, fixed here before any run and never
// widened after a failure to let a difference pass (docs/acceptance.md, "Where the
// rungs come from"). The report lists them with the reasons below.
//
// Where they come from. The CPU computes in fp32 (unit roundoff 6e-8). Parallel
// layouts and accumulation change only the ASSOCIATION of fp32 sums: gradients of
// microbatches added in another order, a GEMM over B*T rows split into several,
// data-parallel sums in rank order, the tied embedding's two halves. A sum of K
// terms re-associated moves by at most about K * 6e-8 of the sum of magnitudes;
// K here is at most a few hundred rows, so 1e-5 relative on losses and norms, and
// 1e-4 of a tensor's largest gradient, leave a margin over rounding while a real
// error (a missing microbatch, a wrong divisor, a stale parameter) moves them by
// percent. AdamW's step is lr * mhat / (sqrt(vhat) + eps), a ratio of the moments, so
// that relative error reaches the weights scaled by lr; the small model trains with
// lr = 1e-3 for this reason (acceptance/small_config.h).
#pragma once

#include <string>
#include <vector>

namespace troupe::acceptance::tol {

// Parity of the actor runtime (DP, PP, combined) with the single-device reference
// after kParityUpdates updates.
inline constexpr int kParityUpdates = 3;
inline constexpr double kLossRel = 1e-5;      // |loss - ref| / |ref| per step
inline constexpr double kGradNormRel = 1e-5;  // pre-clip global norm per step
inline constexpr double kParamAbs = 1e-5;     // max |w - ref| per tensor: 1% of one lr step
inline constexpr double kMomentRel = 1e-4;    // max |m - ref| per tensor / max |ref|

// Accumulation: the global batch as one microbatch vs its microbatches accumulated.
inline constexpr double kAccumLossRel = 1e-6;  // losses are summed in double
inline constexpr double kAccumGradRel = 1e-4;  // max |g - g1| per tensor / max |g1|
// The microbatches must really differ in loss-bearing tokens, or the check proves
// nothing: the smallest count at most this share of the largest.
inline constexpr double kAccumTokenSpread = 0.9;

// Document mask: logits of the second document when the first is replaced.
inline constexpr double kMaskLogitAbs = 1e-5;
// Control run: changing a token of the second document itself must move its later
// logits by at least this much, or the check above has no power.
inline constexpr double kMaskControlMin = 1e-3;

// Padding: loss and every gradient bitwise identical whatever the padding holds (0 differing elements).
// Save / recover: bitwise identical to the uninterrupted run (the CPU determinism contract).

// One line per tolerance for the report: "name = value: why".
std::vector<std::string> describe();

}  // namespace troupe::acceptance::tol
