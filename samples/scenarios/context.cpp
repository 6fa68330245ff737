// ScenarioContext: the mesh and spec overrides, and the calls that reach the observer.
#include <cmath>
#include <cctype>
#include <ostream>

#include "scaling_book.hpp"
#include "scenario.hpp"

namespace meshvk::scenarios {

std::optional<MeshOverride> parse_mesh_shape(std::string_view text) {
  MeshOverride mesh;
  int value = -1;
  for (const char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
      if (value > 1 << 16) return std::nullopt;
    } else if (c == 'x' || c == ',' || c == ')') {
      if (value > 0)
        mesh.sizes.push_back(value);
      else if (c == 'x')
        return std::nullopt;
      value = -1;
    } else if (c != '(' && c != ' ') {
      return std::nullopt;
    }
  }
  if (value > 0) mesh.sizes.push_back(value);
  if (mesh.sizes.empty() || value == 0) return std::nullopt;
  return mesh;
}

Mesh ScenarioContext::mesh(std::vector<int> sizes, std::vector<std::string> names,
                           std::vector<AxisType> types) const {
  if (!mesh_override) return make_mesh(std::move(sizes), std::move(names), std::move(types));
  const MeshOverride& o = *mesh_override;
  std::vector<std::string> new_names = o.names;
  if (new_names.empty()) {
    // Keep the scenario's axis names where it has enough, so its specs still name them.
    for (size_t i = 0; i < o.sizes.size(); ++i)
      new_names.push_back(i < names.size() ? names[i] : std::string(1, static_cast<char>('a' + i)));
  }
  if (types.size() != o.sizes.size()) types.clear();
  return make_mesh(o.sizes, std::move(new_names), std::move(types));
}

PartitionSpec ScenarioContext::spec(const std::string& name, const PartitionSpec& default_spec,
                                    const Mesh& on_mesh) const {
  if (observer) observer->on_input(name, default_spec, on_mesh);
  const auto it = spec_overrides.find(name);
  return it == spec_overrides.end() ? default_spec : it->second;
}

void ScenarioContext::publish(const std::string& name, const Array& array) const {
  if (observer) observer->on_array(name, array);
}

void ScenarioContext::publish_program(const std::string& name, const std::string& text) const {
  if (observer) observer->on_program(name, text);
}

void ScenarioContext::checkpoint(const std::string& label) const {
  if (stop && stop->load()) throw Stopped{};
  if (observer && !observer->on_checkpoint(label)) throw Stopped{};
  if (stop && stop->load()) throw Stopped{};
}

int ScenarioContext::help_or_unknown(const std::string& arg, const char* usage) const {
  if (arg == "--help" || arg == "-h") {
    *out << usage;
    return 0;
  }
  *err << "unknown argument " << arg << "\n" << usage;
  return 2;
}

void ScenarioContext::banner() const {
  const Runtime& rt = Runtime::current();
  *out << "meshvk on " << rt.adapter_name() << ", split into " << rt.num_devices()
       << " virtual devices\n\n";
}

bool report(const ScenarioContext& ctx, const std::string& what, bool ok) {
  *ctx.out << what << ": " << (ok ? "equal" : "NOT EQUAL") << "\n";
  return ok;
}

float max_abs_diff(const Array& a, const Array& b) {
  return programs::max_abs_diff(a, b);
}

}  // namespace meshvk::scenarios
