// optax over pytrees other than Params: a tree's Arrays go to the transformations as Params keyed
// by path and come back in the tree's structure (the template layer in optax.hpp); the checks
// and messages live here.
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "meshvk/error.hpp"
#include "meshvk/optax.hpp"

namespace meshvk::optax::detail {

namespace {

// "'.w1', '.b1'" (at most 12, then how many more), or "no Arrays".
std::string listed(const std::vector<std::string>& paths) {
  if (paths.empty()) return "no Arrays";
  std::string s;
  const size_t shown = std::min<size_t>(paths.size(), 12);
  for (size_t i = 0; i < shown; ++i) s += (i ? ", '" : "'") + paths[i] + "'";
  if (shown < paths.size()) s += ", ... (" + std::to_string(paths.size() - shown) + " more)";
  return s;
}

std::string arrays(size_t n) {
  return std::to_string(n) + (n == 1 ? " Array" : " Arrays");
}

}  // namespace

Params params_by_path(const std::vector<std::string>& paths, const std::vector<Array>& leaves) {
  Params by_path;
  for (size_t i = 0; i < paths.size() && i < leaves.size(); ++i)
    if (!by_path.emplace(paths[i], leaves[i]).second)
      throw Error("optax: two Arrays of the tree have the path '" + paths[i] +
                  "' (a Params name spelled like a path?); every Array needs its own path, as "
                  "the state keeps them by path");
  return by_path;
}

std::vector<Array> leaves_by_path(const std::string& op, const std::vector<std::string>& paths,
                                  const Params& by_path) {
  std::vector<Array> leaves;
  for (const std::string& path : paths) {
    const auto it = by_path.find(path);
    if (it == by_path.end())
      throw Error(op + ": the transformation gave no update for '" + path +
                  "'; every Array of the tree needs one");
    leaves.push_back(it->second);
  }
  return leaves;
}

void require_same_tree(const std::string& op, const std::string& a_what, const std::string& a_key,
                       const std::vector<std::string>& a_paths, const std::string& b_what,
                       const std::string& b_key, const std::vector<std::string>& b_paths) {
  if (a_key == b_key) return;
  std::string what = op + ": " + b_what + " and " + a_what + " are different trees: " + a_what +
                     " have " + arrays(a_paths.size()) + " (" + listed(a_paths) + "), " + b_what +
                     " have " + arrays(b_paths.size()) + " (" + listed(b_paths) + ")";
  if (a_paths == b_paths)
    what += "; the paths agree but the structures differ (" + a_key + " vs " + b_key + ")";
  throw Error(what + "; give " + b_what + " with the structure of " + a_what +
              " (optax: updates have the params' tree structure)");
}

std::function<bool(const std::string&, const Array&)> mask_of_leaves(
    const std::vector<std::string>& paths, const std::vector<bool>& per_leaf) {
  if (paths.size() != per_leaf.size())
    throw Error("optax mask: " + std::to_string(per_leaf.size()) + " bools for a tree of " +
                arrays(paths.size()) + " (" + listed(paths) +
                "); give one per Array, in flatten's order");
  std::map<std::string, bool> by_path;
  for (size_t i = 0; i < paths.size(); ++i) by_path.emplace(paths[i], per_leaf[i]);
  return [by_path = std::move(by_path)](const std::string& path, const Array&) {
    const auto it = by_path.find(path);
    if (it == by_path.end())
      throw Error("optax mask: no entry for the Array '" + path + "'; the mask was made for " +
                  listed([&] {
                    std::vector<std::string> k;
                    for (const auto& kv : by_path) k.push_back(kv.first);
                    return k;
                  }()) +
                  " (give the mask the params' tree)");
    return it->second;
  };
}

}  // namespace meshvk::optax::detail
