// numpy / jax.numpy einsum: the subscripts parser ('...', implicit outputs), diagonals and traces
// (a label repeated within one operand), and any number of operands, contracted two at a time in
// a greedy order (the pair whose result is smallest first, as opt_einsum's 'greedy'). Every step
// is made of ops that partition and differentiate on their own (sum, multiply, transpose,
// broadcast_to and the two-operand product in linalg_ops.cpp).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "exec/program_log.hpp"
#include "graph/call_site.hpp"
#include "graph/einsum.hpp"
#include "meshvk/error.hpp"
#include "meshvk/ops.hpp"

namespace meshvk {

namespace {

// The dimensions an ellipsis stands for get labels no letter can be: chars from 0x80 on.
constexpr int kEllipsisBase = 0x80;
constexpr int kMaxEllipsisDims = 64;

bool is_ellipsis_label(char c) {
  return static_cast<unsigned char>(c) >= kEllipsisBase;
}
char ellipsis_label(int j) {
  return static_cast<char>(kEllipsisBase + j);
}

[[noreturn]] void fail(const std::string& text, const std::string& why) {
  throw Error(
      "einsum: cannot use \"" + text + "\": " + why +
      "; valid forms look like 'ij,jk->ik', 'ij,jk' (implicit output: the labels that appear once, "
      "in alphabetical order), '...ij,...jk->...ik', 'ii->i' (a diagonal), 'ii->' (a trace) or "
      "'ij,jk,kl->il': one letter (a-z, A-Z) per dimension, '...' for any number of dimensions, "
      "operands separated by ',', the output after '->'");
}

// One operand's or the output's subscripts: the letters, and where '...' sits among them.
struct Term {
  std::string letters;
  std::optional<size_t> ellipsis;
};

Term parse_term(const std::string& text, const std::string& term, const std::string& what) {
  Term t;
  for (size_t i = 0; i < term.size(); ++i) {
    const char c = term[i];
    if (c == '.') {
      if (term.compare(i, 3, "...") != 0) fail(text, what + " has a '.' that is not part of '...'");
      if (t.ellipsis) fail(text, what + " has '...' twice");
      t.ellipsis = t.letters.size();
      i += 2;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      t.letters += c;
    } else {
      fail(text, what + " has '" + std::string(1, c) + "', which is not a letter");
    }
  }
  return t;
}

std::string operand_name(size_t k) {
  return "operand " + std::to_string(k);
}

struct Parsed {
  std::vector<std::string> inputs;  // one label per dimension, the ellipsis expanded
  std::string output;
  std::map<char, int64_t> size;  // each label's size (ellipsis labels: broadcast)
};

Parsed parse(const std::string& text0, const std::vector<Array>& ops) {
  std::string text = text0;
  text.erase(std::remove(text.begin(), text.end(), ' '), text.end());
  if (ops.empty()) fail(text0, "no operands were given");
  for (size_t k = 0; k < ops.size(); ++k)
    if (!ops[k].valid()) fail(text0, operand_name(k) + " is an empty Array");
  const auto arrow = text.find("->");
  if (arrow != std::string::npos && text.find("->", arrow + 2) != std::string::npos)
    fail(text0, "'->' appears twice");
  const std::string lhs = text.substr(0, arrow);
  if (lhs.find('-') != std::string::npos || lhs.find('>') != std::string::npos)
    fail(text0, "a '-' or '>' that is not part of '->'");
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const auto comma = lhs.find(',', start);
    const std::string part =
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    terms.push_back(
        parse_term(text0, part, operand_name(terms.size()) + "'s subscripts '" + part + "'"));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ops.size())
    fail(text0, std::to_string(terms.size()) + " operand subscripts for " +
                    std::to_string(ops.size()) + " operands");

  // How many dimensions each '...' stands for; right-aligned against one another, as numpy
  // broadcasts.
  int ellipsis_dims = 0;
  std::vector<int> covered(ops.size(), 0);
  for (size_t k = 0; k < ops.size(); ++k) {
    const int64_t rank = static_cast<int64_t>(ops[k].ndim()),
                  letters = static_cast<int64_t>(terms[k].letters.size());
    if (!terms[k].ellipsis && letters != rank)
      fail(text0, operand_name(k) + "'s subscripts '" + terms[k].letters + "' name " +
                      std::to_string(letters) + " dimensions but it has shape " +
                      shape_to_string(ops[k].shape()) +
                      " (one letter per dimension, or '...' for the rest)");
    if (terms[k].ellipsis && letters > rank)
      fail(text0, operand_name(k) + "'s subscripts name " + std::to_string(letters) +
                      " dimensions besides '...' but it has shape " +
                      shape_to_string(ops[k].shape()));
    covered[k] = static_cast<int>(rank - letters);
    ellipsis_dims = std::max(ellipsis_dims, covered[k]);
  }
  if (ellipsis_dims > kMaxEllipsisDims)
    fail(text0, "'...' stands for more than " + std::to_string(kMaxEllipsisDims) + " dimensions");

  Parsed p;
  for (size_t k = 0; k < ops.size(); ++k) {
    const Term& t = terms[k];
    std::string labels = t.letters;
    if (t.ellipsis) {
      std::string e;
      for (int j = ellipsis_dims - covered[k]; j < ellipsis_dims; ++j) e += ellipsis_label(j);
      labels.insert(*t.ellipsis, e);
    }
    for (size_t d = 0; d < labels.size(); ++d) {
      const char c = labels[d];
      const int64_t n = ops[k].shape()[d];
      const auto [it, fresh] = p.size.emplace(c, n);
      if (fresh || it->second == n) continue;
      if (is_ellipsis_label(c)) {
        if (it->second == 1 || n == 1) {
          it->second = std::max(it->second, n);
          continue;
        }
        fail(text0, "the dimensions '...' stands for do not broadcast: " + operand_name(k) +
                        " has shape " + shape_to_string(ops[k].shape()) +
                        " and an earlier operand has size " + std::to_string(it->second) +
                        " where it has " + std::to_string(n));
      }
      fail(text0, "label '" + std::string(1, c) + "' has size " + std::to_string(it->second) +
                      " in one place and " + std::to_string(n) + " in " + operand_name(k) +
                      " (shape " + shape_to_string(ops[k].shape()) + ")");
    }
    p.inputs.push_back(labels);
  }

  std::string all_ellipsis;
  for (int j = 0; j < ellipsis_dims; ++j) all_ellipsis += ellipsis_label(j);
  if (arrow == std::string::npos) {
    // numpy's implicit output: '...' first, then the labels that appear exactly once, sorted.
    std::map<char, int> count;
    for (const Term& t : terms)
      for (const char c : t.letters) ++count[c];
    p.output = all_ellipsis;
    for (const auto& [c, n] : count)
      if (n == 1) p.output += c;
  } else {
    const std::string rhs = text.substr(arrow + 2);
    const Term out = parse_term(text0, rhs, "the output '" + rhs + "'");
    std::string labels = out.letters;
    if (out.ellipsis) labels.insert(*out.ellipsis, all_ellipsis);
    for (size_t i = 0; i < out.letters.size(); ++i) {
      const char c = out.letters[i];
      if (out.letters.find(c, i + 1) != std::string::npos)
        fail(text0, "output label '" + std::string(1, c) + "' repeats");
      if (!p.size.count(c))
        fail(text0, "output label '" + std::string(1, c) + "' appears in no operand");
    }
    p.output = labels;
  }
  return p;
}

int64_t label_size(const Parsed& p, char c) {
  return p.size.at(c);
}

// Makes the dimensions a size-1 '...' dimension broadcasts against real: numpy broadcasting.
Array broadcast_ellipsis(const Array& x, const std::string& labels, const Parsed& p) {
  Shape want = x.shape();
  for (size_t d = 0; d < labels.size(); ++d) want[d] = label_size(p, labels[d]);
  return want == x.shape() ? x : broadcast_to(x, want);
}

// The diagonal of dimensions d0 < d1 (same size), where d0 was: elements (.., i, .., i, ..)
// selected by a take, as numpy's einsum reads them (a product with an identity mask would add
// NaN * 0 from a NaN or inf off the diagonal, and +0 to a -0 on it).
Array diagonal(const Array& x, size_t d0, size_t d1) {
  const int64_t n = x.shape()[d0];
  std::vector<int> perm;
  for (size_t d = 0; d < x.ndim(); ++d)
    if (d != d0 && d != d1) perm.push_back(static_cast<int>(d));
  perm.push_back(static_cast<int>(d0));
  perm.push_back(static_cast<int>(d1));
  Shape flat_shape;
  for (size_t k = 0; k + 2 < perm.size(); ++k) flat_shape.push_back(x.shape()[static_cast<size_t>(perm[k])]);
  flat_shape.push_back(n * n);  // x holds n * n elements already
  if (n * n + n > std::numeric_limits<int32_t>::max())
    throw Error("einsum: a diagonal of size " + std::to_string(n) + " has more elements (" +
                std::to_string(n * n) + ") than int32 indices reach");
  const Array flat = reshape(transpose(x, perm), flat_shape);
  const Array at = arange(static_cast<int32_t>(n)) * static_cast<int32_t>(n + 1);
  const Array diag = take(flat, at, -1);
  // The diagonal's dimension back where d0 was.
  std::vector<int> back;
  const int last = static_cast<int>(diag.ndim()) - 1;
  for (int d = 0; d < last; ++d) {
    if (d == static_cast<int>(d0)) back.push_back(last);
    back.push_back(d);
  }
  if (static_cast<int>(d0) == last) back.push_back(last);
  return transpose(diag, back);
}

// Repeated labels within one operand become one dimension holding the diagonal.
Array take_diagonals(Array x, std::string& labels) {
  for (size_t d0 = 0; d0 < labels.size(); ++d0) {
    for (size_t d1 = labels.size(); d1-- > d0 + 1;) {
      if (labels[d1] != labels[d0]) continue;
      if (x.shape()[d0] > INT32_MAX)
        throw Error("einsum: a diagonal of size " + std::to_string(x.shape()[d0]) +
                    " is past int32 indices");
      x = diagonal(x, d0, d1);
      labels.erase(d1, 1);
    }
  }
  return x;
}

bool used_elsewhere(char c, const std::vector<std::string>& labels, size_t except_a,
                    size_t except_b, const std::string& output) {
  if (output.find(c) != std::string::npos) return true;
  for (size_t k = 0; k < labels.size(); ++k)
    if (k != except_a && k != except_b && labels[k].find(c) != std::string::npos) return true;
  return false;
}

Array to_output(const Array& x, const std::string& labels, const std::string& output) {
  std::vector<int> summed;
  std::string kept;
  for (size_t d = 0; d < labels.size(); ++d) {
    if (output.find(labels[d]) == std::string::npos)
      summed.push_back(static_cast<int>(d));
    else
      kept += labels[d];
  }
  Array r = summed.empty() ? x : sum(x, summed);
  std::vector<int> perm;
  bool identity = true;
  for (const char c : output) {
    perm.push_back(static_cast<int>(kept.find(c)));
    identity = identity && perm.back() == static_cast<int>(perm.size() - 1);
  }
  return identity ? r : transpose(r, perm);
}

}  // namespace

Array einsum(const std::string& subscripts, const std::vector<Array>& operands,
             const std::optional<Sharding>& out_sharding, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  Parsed p = parse(subscripts, operands);
  std::vector<Array> ops;
  std::vector<std::string>& labels = p.inputs;
  for (size_t k = 0; k < operands.size(); ++k) {
    ops.push_back(broadcast_ellipsis(operands[k], labels[k], p));
    ops[k] = take_diagonals(ops[k], labels[k]);
  }
  // A label only one operand has and the output lacks is summed away before any product.
  for (size_t k = 0; k < ops.size(); ++k) {
    std::vector<int> axes;
    std::string kept;
    for (size_t d = 0; d < labels[k].size(); ++d) {
      if (used_elsewhere(labels[k][d], labels, k, k, p.output))
        kept += labels[k][d];
      else
        axes.push_back(static_cast<int>(d));
    }
    if (!axes.empty()) ops[k] = sum(ops[k], axes);
    labels[k] = kept;
  }
  // Greedy order: contract the pair whose result is smallest (ties: the first pair), keeping the
  // labels the output or another operand still needs.
  while (ops.size() > 2) {
    size_t best_i = 0, best_j = 1;
    double best = -1;
    std::string best_labels;
    for (size_t i = 0; i < ops.size(); ++i) {
      for (size_t j = i + 1; j < ops.size(); ++j) {
        std::string kept;
        for (const char c : labels[i] + labels[j])
          if (kept.find(c) == std::string::npos && used_elsewhere(c, labels, i, j, p.output))
            kept += c;
        double elements = 1;
        for (const char c : kept) elements *= static_cast<double>(label_size(p, c));
        if (best < 0 || elements < best) {
          best = elements;
          best_i = i;
          best_j = j;
          best_labels = kept;
        }
      }
    }
    Array r = detail::einsum_pair(subscripts, labels[best_i], labels[best_j], best_labels,
                                  ops[best_i], ops[best_j], std::nullopt);
    ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(best_j));
    labels.erase(labels.begin() + static_cast<std::ptrdiff_t>(best_j));
    ops[best_i] = r;
    labels[best_i] = best_labels;
  }
  Array r = ops.size() == 2 ? detail::einsum_pair(subscripts, labels[0], labels[1], p.output,
                                                  ops[0], ops[1], out_sharding)
                            : to_output(ops[0], labels[0], p.output);
  const exec::RuleScope rule([] { return std::string("einsum's out_sharding"); });
  return out_sharding && !(r.sharding() == *out_sharding) ? device_put(r, *out_sharding) : r;
}

Array einsum(const std::string& subscripts, const std::vector<Array>& operands, DType preferred_element_type,
             const std::optional<Sharding>& out_sharding, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  const auto ops = detail::for_preferred_type("einsum", operands, preferred_element_type);
  return astype(einsum(subscripts, ops, out_sharding), preferred_element_type);
}

Array einsum(const std::string& subscripts, const Array& a, const Array& b, DType preferred_element_type,
             SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return einsum(subscripts, std::vector<Array>{a, b}, preferred_element_type);
}

Array einsum(const std::string& subscripts, const Array& a, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return einsum(subscripts, std::vector<Array>{a});
}

Array einsum(const std::string& subscripts, const Array& a, const Array& b, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return einsum(subscripts, std::vector<Array>{a, b});
}

Array einsum(const std::string& subscripts, const Array& a, const Array& b,
             const std::optional<Sharding>& out_sharding, SourceLocation loc) {
  const detail::UserCallSite call_site(loc);
  return einsum(subscripts, std::vector<Array>{a, b}, out_sharding);
}

}  // namespace meshvk
