#include "acceptance/tolerances.h"

#include <fmt/format.h>

namespace troupe::acceptance::tol {

std::vector<std::string> describe() {
  return {
      fmt::format("parity loss: relative difference <= {:g} per step, after {} updates (fp32 sums re-associated "
                  "over at most a few hundred rows)",
                  kLossRel, kParityUpdates),
      fmt::format("parity gradient norm: relative difference <= {:g} per step", kGradNormRel),
      fmt::format("parity parameters: max |runtime - reference| <= {:g} per tensor (1% of one step at lr 1e-3)",
                  kParamAbs),
      fmt::format("parity Adam moments: max |runtime - reference| <= {:g} x max |reference| per tensor", kMomentRel),
      fmt::format("accumulation loss: relative difference <= {:g} (per-token losses summed in double)", kAccumLossRel),
      fmt::format("accumulation gradients: max |accumulated - one microbatch| <= {:g} x max |one microbatch| per "
                  "tensor",
                  kAccumGradRel),
      fmt::format("accumulation microbatches: smallest loss-token count <= {:g} x the largest (else the check "
                  "cannot tell a mean of means from the token-weighted mean)",
                  kAccumTokenSpread),
      fmt::format("document mask: max |logit change| at the second document <= {:g} when the first is replaced",
                  kMaskLogitAbs),
      fmt::format("document mask control: changing the second document's own token moves its later logits by "
                  ">= {:g}",
                  kMaskControlMin),
      "padding: loss and every gradient bitwise identical whatever the padding positions hold (0 elements differ)",
      "save / recover: losses, LR, sample IDs, counters, weights and Adam moments bitwise identical to the "
      "uninterrupted run (CPU determinism contract, docs/numerics.md)",
  };
}

}  // namespace troupe::acceptance::tol
