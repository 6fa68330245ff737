#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace meshvk {

struct NoneType {};
// An unsharded dimension in a PartitionSpec, as Python's None in P('a', None).
inline constexpr NoneType None{};

// How one array dimension is split: by no mesh axis (None), one axis ('a') or several, major
// first (('a', 'b')).
struct SpecEntry {
  std::vector<std::string> axes;
  bool tuple = false;  // written as a tuple; only changes printing of one-axis entries

  SpecEntry() = default;
  SpecEntry(NoneType) {}
  SpecEntry(const char* axis);  // throws Error for a null pointer (write None for no axis)
  SpecEntry(std::string axis) : axes{std::move(axis)} {}
  SpecEntry(std::initializer_list<std::string> tuple_axes) : axes(tuple_axes), tuple(true) {}
  // {"a", "b"}: each name is checked (a null pointer throws Error).
  SpecEntry(std::initializer_list<const char*> tuple_axes);
  SpecEntry(std::vector<std::string> tuple_axes) : axes(std::move(tuple_axes)), tuple(true) {}

  bool is_none() const { return axes.empty(); }
  // 'a', ('a', 'b') or None, as Python prints them.
  std::string to_string() const;
  bool operator==(const SpecEntry& other) const { return axes == other.axes; }
};

// jax.sharding.PartitionSpec: one entry per leading array dimension; missing trailing entries
// mean None. Equality ignores trailing Nones, so P('a') == P('a', None).
class PartitionSpec {
 public:
  PartitionSpec() = default;
  explicit PartitionSpec(std::vector<SpecEntry> entries) : entries_(std::move(entries)) {}

  // Parses JAX's own syntax: "P('a', None)", "PartitionSpec(('a', 'b'), None)", "P()";
  // throws Error showing the valid forms.
  static PartitionSpec parse(std::string_view text);

  size_t size() const { return entries_.size(); }
  const std::vector<SpecEntry>& entries() const& { return entries_; }
  std::vector<SpecEntry> entries() const&& { return entries_; }  // a temporary's: a copy
  // Entry for dimension `dim`; None past the end.
  const SpecEntry& operator[](size_t dim) const;
  // Every axis named anywhere in the spec, in order of appearance.
  std::vector<std::string> axes() const;

  // The same spec without trailing Nones: what ops give their results.
  PartitionSpec trimmed() const;

  // "PartitionSpec('a', None)"
  std::string to_string() const;
  bool operator==(const PartitionSpec& other) const;

 private:
  std::vector<SpecEntry> entries_;
};

// One argument of P(...): absent, None, an axis name or a braced tuple of names.
struct SpecArg {
  bool present = false;
  SpecEntry entry;
  SpecArg() = default;
  SpecArg(NoneType) : present(true) {}
  SpecArg(const char* axis) : present(true), entry(axis) {}
  SpecArg(std::string axis) : present(true), entry(std::move(axis)) {}
  SpecArg(std::initializer_list<std::string> axes) : present(true), entry(axes) {}
  SpecArg(std::initializer_list<const char*> axes) : present(true), entry(axes) {}
  SpecArg(SpecEntry e) : present(true), entry(std::move(e)) {}
};

// P('a', None), P({"a", "b"}, None), P(): reads like JAX's PartitionSpec shorthand.
PartitionSpec P(SpecArg d0 = {}, SpecArg d1 = {}, SpecArg d2 = {}, SpecArg d3 = {},
                SpecArg d4 = {}, SpecArg d5 = {}, SpecArg d6 = {}, SpecArg d7 = {});

}  // namespace meshvk
