// Every collective on every 8-device mesh, over every axis and ordered axis tuple, tiled and
// untiled, with both algorithms, against a host reference that knows nothing of the engine.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <numeric>

#include "meshvk/meshvk.hpp"
#include "test_support.hpp"

namespace mv = meshvk;
using mv::Array;
using mv::P;

namespace {

struct MeshDef {
  std::vector<int> sizes;
  std::vector<std::string> names;
};

// Host view of the mesh: for each position, its group (positions in rank order) over `axes`.
struct HostGroups {
  std::vector<std::vector<int>> group_of;  // per position: the members of its group, by rank
  std::vector<int> rank;
};

HostGroups host_groups(const MeshDef& m, const std::vector<std::string>& axes) {
  const int n = std::accumulate(m.sizes.begin(), m.sizes.end(), 1, std::multiplies<int>());
  auto coords = [&](int p) {
    std::vector<int> c(m.sizes.size());
    for (int d = static_cast<int>(m.sizes.size()) - 1; d >= 0; --d) {
      c[d] = p % m.sizes[d];
      p /= m.sizes[d];
    }
    return c;
  };
  auto axis_at = [&](const std::string& a) { return static_cast<int>(std::find(m.names.begin(), m.names.end(), a) - m.names.begin()); };
  HostGroups g;
  g.group_of.resize(n);
  g.rank.resize(n);
  std::map<std::vector<int>, std::vector<std::pair<int, int>>> by_rest;
  for (int p = 0; p < n; ++p) {
    const auto c = coords(p);
    std::vector<int> rest;
    for (size_t d = 0; d < c.size(); ++d)
      if (std::find(axes.begin(), axes.end(), m.names[d]) == axes.end()) rest.push_back(c[d]);
    int r = 0;
    for (const auto& a : axes) r = r * m.sizes[axis_at(a)] + c[axis_at(a)];
    g.rank[p] = r;
    by_rest[rest].push_back({r, p});
  }
  for (auto& [rest, members] : by_rest) {
    std::sort(members.begin(), members.end());
    std::vector<int> ordered;
    for (const auto& [r, p] : members) ordered.push_back(p);
    for (const int p : ordered) g.group_of[p] = ordered;
  }
  return g;
}

std::vector<std::vector<std::string>> axis_tuples(const MeshDef& m) {
  std::vector<std::vector<std::string>> t;
  for (const auto& a : m.names) t.push_back({a});
  for (const auto& a : m.names)
    for (const auto& b : m.names)
      if (a != b) t.push_back({a, b});
  if (m.names.size() == 3) t.push_back(m.names);
  return t;
}

}  // namespace

TEST(CollectiveSweep, EveryCollectiveMeshAxisTupleAndAlgorithm) {
  const std::vector<MeshDef> meshes = {{{8}, {"x"}}, {{4, 2}, {"x", "y"}}, {{2, 4}, {"x", "y"}}, {{2, 2, 2}, {"x", "y", "z"}}};
  const int64_t local = 512;  // past the ring's minimum of 64 elements per member
  int checked = 0;
  for (const MeshDef& m : meshes) {
    const auto mesh = mv::make_mesh(m.sizes, m.names);
    const mv::PartitionSpec all(std::vector<mv::SpecEntry>{mv::SpecEntry(m.names)});
    std::vector<float> host(8 * local);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>((i * 7919) % 1000) - 500.0f;  // exact sums
    const auto x = mv::device_put(std::span<const float>(host), {8 * local}, mv::NamedSharding(mesh, all));
    auto piece = [&](int p) { return std::vector<float>(host.begin() + p * local, host.begin() + (p + 1) * local); };
    for (const auto& axes : axis_tuples(m)) {
      const HostGroups g = host_groups(m, axes);
      const int n = static_cast<int>(g.group_of[0].size());
      const mv::AxisNames names(axes);
      // Each case: the shard_map body and the host result for position p.
      struct Case {
        const char* name;
        std::function<Array(const Array&)> body;
        std::function<std::vector<float>(int)> want;
      };
      std::vector<std::pair<int, int>> shift;
      for (int r = 0; r < n; ++r) shift.push_back({r, (r + 1) % n});
      const std::vector<Case> cases = {
          {"psum", [&](const Array& v) { return mv::psum(v, names); },
           [&](int p) {
             std::vector<float> s(local, 0.f);
             for (const int q : g.group_of[p])
               for (int64_t i = 0; i < local; ++i) s[i] += host[q * local + i];
             return s;
           }},
          {"pmax", [&](const Array& v) { return mv::pmax(v, names); },
           [&](int p) {
             std::vector<float> s(local, -1e30f);
             for (const int q : g.group_of[p])
               for (int64_t i = 0; i < local; ++i) s[i] = std::max(s[i], host[q * local + i]);
             return s;
           }},
          {"all_gather tiled", [&](const Array& v) { return mv::all_gather(v, names, 0, true); },
           [&](int p) {
             std::vector<float> s;
             for (const int q : g.group_of[p]) {
               const auto pq = piece(q);
               s.insert(s.end(), pq.begin(), pq.end());
             }
             return s;
           }},
          {"all_gather untiled", [&](const Array& v) { return mv::reshape(mv::all_gather(v, names, 1), {n * local}); },
           [&](int p) {
             // [local, n] flattened: element i of every member, in rank order.
             std::vector<float> s;
             for (int64_t i = 0; i < local; ++i)
               for (const int q : g.group_of[p]) s.push_back(host[q * local + i]);
             return s;
           }},
          {"psum_scatter tiled", [&](const Array& v) { return mv::psum_scatter(v, names, 0, true); },
           [&](int p) {
             const int64_t c = local / n;
             std::vector<float> s(c, 0.f);
             for (const int q : g.group_of[p])
               for (int64_t i = 0; i < c; ++i) s[i] += host[q * local + g.rank[p] * c + i];
             return s;
           }},
          {"ppermute", [&](const Array& v) { return mv::ppermute(v, names, shift); },
           [&](int p) { return piece(g.group_of[p][(g.rank[p] + n - 1) % n]); }},
          {"all_to_all tiled", [&](const Array& v) { return mv::all_to_all(v, names, 0, 0, true); },
           [&](int p) {
             const int64_t c = local / n;
             std::vector<float> s;
             for (const int q : g.group_of[p])
               for (int64_t i = 0; i < c; ++i) s.push_back(host[q * local + g.rank[p] * c + i]);
             return s;
           }},
      };
      for (const char* algo : {"one_shot", "ring"}) {
        setenv("MESHVK_COLLECTIVE_ALGO", algo, 1);
        for (const Case& c : cases) {
          const auto got = mv::shard_map(c.body, mesh, {all}, all)(x).to_host<float>();
          const int64_t each = static_cast<int64_t>(got.size()) / 8;
          for (int p = 0; p < 8; ++p) {
            const auto want = c.want(p);
            ASSERT_EQ(static_cast<int64_t>(want.size()), each) << c.name;
            for (int64_t i = 0; i < each; ++i)
              ASSERT_EQ(got[p * each + i], want[i]) << c.name << " over " << axes.size() << " axes on mesh of rank "
                                                    << m.sizes.size() << " (" << algo << "), position " << p << " element " << i;
          }
          ++checked;
        }
      }
      unsetenv("MESHVK_COLLECTIVE_ALGO");
    }
  }
  EXPECT_GT(checked, 250);
}
