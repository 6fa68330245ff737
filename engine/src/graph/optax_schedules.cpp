// optax's schedules (optax/schedules/_schedule.py, _join.py): functions of the int32 step count
// computed with meshvk's ops in float32, so they run on the device and under jit, where the
// count is part of the traced state.
#include <cmath>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"
#include "meshvk/optax.hpp"

namespace meshvk::optax {

namespace {
// A float32 scalar of `value` where the count lies (its device or mesh, replicated).
Array constant_like(const Array& count, float value) {
  return astype(count, DType::float32) * 0.0f + value;
}
}  // namespace

Schedule constant_schedule(float value) {
  return [value](const Array& count) { return constant_like(count, value); };
}

Schedule polynomial_schedule(float init_value, float end_value, float power_, int transition_steps,
                             int transition_begin) {
  if (transition_steps <= 0) return constant_schedule(init_value);  // as optax (it logs)
  if (transition_begin < 0) transition_begin = 0;
  const float span = static_cast<float>(static_cast<double>(init_value) - end_value);
  return [=](const Array& count) {
    const Array c = clip(count - transition_begin, 0, transition_steps);
    const Array frac = 1.0f - c / transition_steps;  // int32 / int: float32
    // optax's linear schedule passes power 1 (an int: x ** 1 is x exactly).
    return span * (power_ == 1.0f ? frac : power(frac, power_)) + end_value;
  };
}

Schedule linear_schedule(float init_value, float end_value, int transition_steps,
                         int transition_begin) {
  return polynomial_schedule(init_value, end_value, 1.0f, transition_steps, transition_begin);
}

Schedule exponential_decay(float init_value, int transition_steps, float decay_rate,
                           int transition_begin, bool staircase, std::optional<float> end_value) {
  if (!std::isfinite(decay_rate))
    throw Error("optax.exponential_decay: decay_rate = " + std::to_string(decay_rate) +
                "; give a finite decay rate");
  if (transition_steps <= 0 || decay_rate == 0.0f) return constant_schedule(init_value);
  if (transition_begin < 0) transition_begin = 0;
  return [=](const Array& count) {
    const Array decreased = count - transition_begin;
    // staircase: jnp.floor of the float32 quotient; the integer floor division is the same for
    // every count below 2^24 and exact beyond.
    const Array p = staircase ? astype(floor_divide(decreased, transition_steps), DType::float32)
                              : decreased / transition_steps;
    Array decayed = where(decreased <= 0, init_value, init_value * power(decay_rate, p));
    if (end_value)
      decayed = decay_rate < 1.0f ? maximum(decayed, *end_value) : minimum(decayed, *end_value);
    return decayed;
  };
}

Schedule cosine_decay_schedule(float init_value, int decay_steps, float alpha, float exponent) {
  if (decay_steps <= 0)
    throw Error("optax.cosine_decay_schedule: decay_steps = " + std::to_string(decay_steps) +
                "; the cosine decay needs positive decay_steps");
  const float steps = static_cast<float>(decay_steps);
  const float pi = std::numbers::pi_v<float>;
  return [=](const Array& count) {
    const Array c = minimum(astype(count, DType::float32), steps);
    const Array cosine = 0.5f * (1.0f + cos(pi * c / steps));
    const Array decayed =
        (1.0f - alpha) * (exponent == 1.0f ? cosine : power(cosine, exponent)) + alpha;
    return init_value * decayed;
  };
}

Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int> boundaries) {
  if (schedules.empty() || boundaries.size() + 1 != schedules.size())
    throw Error("optax.join_schedules: " + std::to_string(schedules.size()) + " schedules and " +
                std::to_string(boundaries.size()) +
                " boundaries; give one schedule more than boundaries (at least one schedule)");
  for (size_t i = 0; i < schedules.size(); ++i)
    if (!schedules[i])
      throw Error("optax.join_schedules: schedules[" + std::to_string(i) + "] is empty");
  return [schedules = std::move(schedules), boundaries = std::move(boundaries)](const Array& step) {
    Array output = schedules[0](step);
    for (size_t i = 0; i < boundaries.size(); ++i)
      output = where(step < boundaries[i], output, schedules[i + 1](step - boundaries[i]));
    return output;
  };
}

Schedule warmup_cosine_decay_schedule(float init_value, float peak_value, int warmup_steps,
                                      int decay_steps, float end_value, float exponent) {
  if (decay_steps - warmup_steps <= 0)
    throw Error("optax.warmup_cosine_decay_schedule: decay_steps = " + std::to_string(decay_steps) +
                " and warmup_steps = " + std::to_string(warmup_steps) +
                "; decay_steps counts the warmup, so it must exceed warmup_steps");
  const float alpha = peak_value == 0.0f ? 0.0f : end_value / peak_value;
  return join_schedules(
      {linear_schedule(init_value, peak_value, warmup_steps),
       cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)},
      {warmup_steps});
}

}  // namespace meshvk::optax
