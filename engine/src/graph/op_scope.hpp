#pragma once
// Which program op the device work of a graph op came from: every recording begun in the scope
// of a profile::OpScope carries the op's name (profile::Span::op), so the profiler's spans can be
// matched to the lines of the program text (JitFunction::program_text, Lowered::as_text).
//
// The names are the first word of the line each op prints in the program text:
//   "fusion"        a fused elementwise chain, when it runs (detail::materialized)
//   "dot_general"   matmul, dot and einsum (their local products)
//   "sum", "mean", "max", "min", "argmax", "argmin"   reductions
//   "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
//   "collective-broadcast"   collectives (psum/pmax/pmin, all_gather, psum_scatter, ...)
//   "reshard"       data moved between layouts: device_put, reshard, with_sharding_constraint,
//                   out_shardings, and the gathers other ops do first
// Ops that print no line of their own (shape ops, take, argsort, one_hot, random ops, constants,
// copies, to_host) use their API name ("transpose", "take", "uniform", "arange", ...).
//
// Nesting: an op that prints a line (detail::OpScope below, a profile::OpScope) always tags
// what it records, even inside another op, so the innermost such op wins: the all-reduce that
// finishes a sharded contraction says "all-reduce" while its local products say "dot_general",
// and the reshard that lays out an operand says "reshard". An op without a line of its own
// (detail::PartOpScope) tags its work only outside any other op; inside one, its work is part of
// that op (the transpose of all_gather(axis=1) says "all-gather"), so the spans of ops that print
// lines match those lines; only a line-less op called directly (a transpose in a jit body, the
// backward pass's broadcasts) names a span after no line. Jit input refreshes on replay say
// "jit input", and the spans a replay resubmits keep the ops they were traced with.
//
// While profiling is off each scope costs one branch and builds no string.
#include <optional>

#include "profile/hooks.hpp"

namespace meshvk::detail {

class OpScope {
 public:
  explicit OpScope(const char* op) {
    if (profile::on()) [[unlikely]]
      scope_.emplace(op);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  std::optional<profile::OpScope> scope_;
};

class PartOpScope {
 public:
  explicit PartOpScope(const char* op) {
    if (profile::on() && !*profile::context().op) [[unlikely]]
      scope_.emplace(op);
  }
  PartOpScope(const PartOpScope&) = delete;
  PartOpScope& operator=(const PartOpScope&) = delete;

 private:
  std::optional<profile::OpScope> scope_;
};

}  // namespace meshvk::detail
