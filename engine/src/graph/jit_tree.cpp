// The errors of jit's static arguments and structured arguments (the template layer in jit.hpp),
// and the out_shardings trees of structured results.
#include <algorithm>
#include <string>
#include <vector>

#include "meshvk/error.hpp"
#include "meshvk/jit.hpp"

namespace meshvk::detail {

namespace {
// 'a', 'b', 'c'
std::string quoted(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& name : names) s += (s.empty() ? "'" : ", '") + name + "'";
  return s;
}
}  // namespace

void jit_static_argnums_error(const std::string& name, int argnum, size_t arguments, bool traced) {
  if (traced)
    throw Error("jit(" + name + "): static_argnums has " + std::to_string(argnum) +
                ", but argument " + std::to_string(argnum) +
                " is an Array (or a structure of Arrays), which jit traces; static arguments are "
                "bools, integers, floats, enums "
                "and strings");
  throw Error("jit(" + name + "): static_argnums has " + std::to_string(argnum) +
              " but the function was called with " + std::to_string(arguments) + " arguments");
}

void jit_unlisted_static_error(const std::string& name, size_t argnum) {
  throw Error("jit(" + name + "): argument " + std::to_string(argnum) +
              " is a static value (not an Array), but static_argnums does not name it; add " +
              std::to_string(argnum) + " to static_argnums (or leave static_argnums empty)");
}

std::vector<int> jit_donated_leaves(const std::string& name, const std::vector<int>& donate_argnums,
                                    const std::vector<bool>& traced, const std::vector<size_t>& leaf_counts) {
  std::vector<int> leaves;
  for (const int k : donate_argnums) {
    if (k < 0 || static_cast<size_t>(k) >= traced.size())
      throw Error("jit(" + name + "): donate_argnums has " + std::to_string(k) + " but the function was called with " +
                  std::to_string(traced.size()) + " arguments; give positions 0 to " +
                  std::to_string(static_cast<int>(traced.size()) - 1));
    if (!traced[static_cast<size_t>(k)])
      throw Error("jit(" + name + "): donate_argnums has " + std::to_string(k) + ", but argument " + std::to_string(k) +
                  " is a static value; only Arrays (or structures of them) can be donated");
    size_t first = 0;
    for (int i = 0; i < k; ++i) first += leaf_counts[static_cast<size_t>(i)];
    for (size_t j = 0; j < leaf_counts[static_cast<size_t>(k)]; ++j) leaves.push_back(static_cast<int>(first + j));
  }
  std::sort(leaves.begin(), leaves.end());
  leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
  return leaves;
}

void jit_tree_shardings_error(const std::string& name, size_t given, size_t wanted) {
  throw Error("jit(" + name + "): " + std::to_string(given) + " in_shardings for a function with " +
              std::to_string(wanted) +
              " non-static arguments; give one per non-static argument (nullopt to follow the "
              "data), as jax.jit");
}

namespace {
// shard_map's in_specs / out_specs, matched as spec trees (see SpecTree in shard_map.hpp).
bool spec_option(const TreePlace& where) {
  const std::string option = where.option;
  return option == "in_specs" || option == "out_specs";
}
// "jit(step): out_shardings" (or in_shardings), or device_put's or shard_map's own.
std::string shardings_of(const TreePlace& where) {
  if (where.function == "device_put") return "device_put: the shardings";
  if (where.function == "optax.state_shardings") return "optax.state_shardings: the shardings";
  if (spec_option(where)) return where.function + ": " + where.option;
  return "jit(" + where.function + "): " + where.option;
}
// What the tree is matched against there.
std::string value_at(const TreePlace& where) {
  const std::string option = where.option;
  if (where.function == "optax.state_shardings") return "the params";
  return option == "in_shardings" || option == "in_specs" ? "the argument" : "the result";
}
// A ShardingTree's words in a spec tree's: its leaves are PartitionSpecs, with no nullopt.
std::string in_spec_words(const TreePlace& where, std::string text) {
  if (!spec_option(where)) return text;
  const auto replace = [&text](const std::string& from, const std::string& to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  };
  replace("a sharding (or nullopt)", "a PartitionSpec");
  replace("a sharding", "a PartitionSpec");
  replace("one sharding", "one PartitionSpec");
  replace("ShardingTree::", "SpecTree::");
  replace(" (nullopt to follow the data)", "");
  return text;
}
}  // namespace

void out_sharding_tree_error(const TreePlace& where, const ShardingTree& given,
                             const std::string& what, const std::string& valid) {
  throw Error(in_spec_words(where, shardings_of(where) + " for " + where.path + " is " +
                                       given.describe() + " but " + value_at(where) +
                                       " there is " + what + "; give " + valid));
}

void check_out_sharding_names(const TreePlace& where, const ShardingTree& given,
                              const std::vector<std::string>& names) {
  const auto& dict = given.names();
  for (const std::string& name : names) {
    const auto entries = std::count(dict.begin(), dict.end(), name);
    if (entries != 1)
      throw Error(in_spec_words(
          where,
          shardings_of(where) + " for " + where.path + " (Params) " +
              (entries ? "names '" + name + "' more than once" : "has no entry '" + name + "'") +
              "; ShardingTree::dict needs one entry for every name of " + value_at(where) +
              " (nullopt to follow the data), or give one sharding for all of it"));
  }
  for (const std::string& name : dict)
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw Error(shardings_of(where) + " for " + where.path + " (Params) names '" + name +
                  "', which " + value_at(where) + " lacks; its names are " + quoted(names));
}

ShardingTree whole_result_tree(const std::vector<ShardingTree>& out_shardings) {
  return out_shardings.size() == 1 ? out_shardings.front() : ShardingTree::list(out_shardings);
}

}  // namespace meshvk::detail

namespace meshvk {

void device_put_tree_error(const std::string& what) { throw Error("device_put: " + what); }

std::string ShardingTree::describe() const {
  switch (kind_) {
    case Kind::leaf:
      return leaf_ ? "a sharding" : "nullopt";
    case Kind::list:
      return "a list of " + std::to_string(elements_.size()) +
             (elements_.size() == 1 ? " entry" : " entries");
    case Kind::dict:
      return "a dict of " + (names_.empty() ? std::string("no names") : detail::quoted(names_));
  }
  return "a tree";
}

}  // namespace meshvk
