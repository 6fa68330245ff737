// The meshvk tool's command line (see cli_args.hpp).
#include "cli_args.hpp"

#include <cctype>
#include <cmath>
#include <meshvk/error.hpp>
#include <meshvk/mesh.hpp>
#include <meshvk/partition_spec.hpp>

namespace meshvk_cli {

const std::string_view kUsage = R"USAGE(usage: meshvk <command> [options]

commands:
  devices     list the virtual devices of the Vulkan runtime
  visualize   print how an array is laid out over a device mesh, as
              jax.debug.visualize_array_sharding prints it
  estimate    project the samples' programs onto real hardware (TPU v5e/v5p,
              H100, A100, this adapter): step time, critical path, shares
  help        show this help (also --help, -h)
  --version   print meshvk's version

visualize options:
  --shape D0,D1,...     array shape, e.g. 8192,8192; '' or () for a scalar (required)
  --mesh N0xN1...       mesh axis sizes, e.g. 4x2 (default 8)
  --axes A,B,...        mesh axis names, one per mesh axis
                        (default x, x,y or x,y,z by the number of mesh axes)
  --spec SPEC           PartitionSpec in JAX syntax, e.g. "P('a', 'b')" or
                        "P(('a', 'b'), None)" (default P())
  --color, --no-color   force colours on or off (default: on when stdout is a terminal)
  --scale S             picture size: 1 draws a square array 10 lines high (default 1)
  --min-width N         narrowest cell, in columns (default 9)
  --max-width N         widest picture, in columns (default 80)
  --platform CPU|GPU    device label (default: the platform of the Vulkan runtime)
  A picture may hold at most 1000000 characters (lines x columns, over every
  slice); a larger one is refused: lower --scale, --max-width or --min-width.

estimate options:
  --hardware H          a shipped description (tpu_v5e, tpu_v5p, h100_sxm, a100,
                        this_adapter) or a .hw file; repeatable (default: all)
  --program P           a program name (see --list); repeatable (default: all)
  --small               the samples' small sizes, not the tutorial's
  --measure             also time each program here, beside this_adapter's projection
  --sample S            run sample S (or all) at its small sizes and project every
                        jit program it traced instead; repeatable
  --trace FILE          write every projected timeline as Chrome trace JSON
  --print-hardware H    print a description as a .hw file (this_adapter: measured)
  --list                list the programs and the shipped hardware

example:
  meshvk visualize --shape 8192,8192 --mesh 4x2 --axes a,b --spec "P('a', 'b')"
)USAGE";

namespace {

// ---------------------------------------------------------------------------------------------
// Values

std::string trim(std::string_view s) {
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    parts.push_back(trim(text.substr(start, end == std::string_view::npos ? end : end - start)));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// The whole of `text` as an integer in [min, max]; `what` names it in the error.
long long parse_integer(const std::string& text, const std::string& what, long long min,
                        long long max) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || value < min || value > max)
    throw UsageError(what + " '" + text + "' is not a whole number from " + std::to_string(min) +
                     " to " + std::to_string(max));
  return value;
}

double parse_number(const std::string& text, const std::string& what) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || !std::isfinite(value) || value < 0)
    throw UsageError(what + " '" + text + "' is not a number of 0 or more, such as 1 or 0.5");
  return value;
}

// "8192,8192", "(8192, 8192)", "32" or "" (a scalar).
meshvk::Shape parse_shape(std::string text) {
  text = trim(text);
  if (text.size() >= 2 && text.front() == '(' && text.back() == ')')
    text = trim(std::string_view(text).substr(1, text.size() - 2));
  meshvk::Shape shape;
  if (text.empty()) return shape;
  std::vector<std::string> dims = split(text, ',');
  if (dims.size() > 1 && dims.back().empty()) dims.pop_back();  // "(32,)"
  for (const std::string& d : dims)
    shape.push_back(parse_integer(d, "--shape dimension", 0, 1LL << 40));
  return shape;
}

// "4x2" or "8".
std::vector<int> parse_mesh(const std::string& text) {
  std::vector<int> sizes;
  for (const std::string& s : split(text, 'x')) {
    if (sizes.size() == kMaxMeshAxes)
      throw UsageError("--mesh has more than " + std::to_string(kMaxMeshAxes) +
                       " axes; use at most " + std::to_string(kMaxMeshAxes));
    sizes.push_back(static_cast<int>(parse_integer(s, "--mesh axis size", 1, kMaxDevices)));
  }
  return sizes;
}

std::string mesh_text(const std::vector<int>& sizes) {
  std::string text;
  for (const int s : sizes) text += (text.empty() ? "" : "x") + std::to_string(s);
  return text;
}

std::vector<std::string> parse_axes(const std::string& text) {
  std::vector<std::string> names = split(text, ',');
  for (const std::string& n : names)
    if (n.empty()) throw UsageError("--axes '" + text + "' has an empty axis name; write a,b");
  return names;
}

std::string parse_platform(const std::string& text) {
  std::string upper;
  for (const char c : text) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper != "CPU" && upper != "GPU")
    throw UsageError("--platform '" + text + "' is not CPU or GPU");
  return upper;
}

// ---------------------------------------------------------------------------------------------
// The command line

// Reads the flags of `visualize`. A flag's value follows it (--shape 8,8) or an '=' (--shape=8,8).
VisualizeArgs parse_visualize(const std::vector<std::string>& args, bool& wants_help) {
  VisualizeArgs v;
  bool has_shape = false;
  bool has_axes = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
    }
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)
        throw UsageError("missing value for " + flag);
      return args[++i];
    };
    auto no_value = [&] {
      if (inline_value) throw UsageError(flag + " takes no value");
    };
    if (flag == "--help" || flag == "-h") {
      no_value();
      wants_help = true;
    } else if (flag == "--shape") {
      v.shape = parse_shape(value());
      has_shape = true;
    } else if (flag == "--mesh") {
      v.mesh_sizes = parse_mesh(value());
    } else if (flag == "--axes") {
      v.axis_names = parse_axes(value());
      has_axes = true;
    } else if (flag == "--spec") {
      v.spec = value();
    } else if (flag == "--color") {
      no_value();
      v.options.use_color = true;
    } else if (flag == "--no-color") {
      no_value();
      v.options.use_color = false;
    } else if (flag == "--scale") {
      const std::string text = value();
      v.options.scale = parse_number(text, "--scale");
      if (v.options.scale > kMaxScale)
        throw UsageError("--scale " + text + " is above " +
                         std::to_string(static_cast<int>(kMaxScale)) + ", the largest picture " +
                         "meshvk visualize draws");
    } else if (flag == "--min-width") {
      v.options.min_width = static_cast<int>(parse_integer(value(), "--min-width", 0, 10000));
    } else if (flag == "--max-width") {
      v.options.max_width = static_cast<int>(parse_integer(value(), "--max-width", 1, 10000));
    } else if (flag == "--platform") {
      v.platform = parse_platform(value());
    } else {
      throw UsageError("unknown option '" + args[i] + "' for visualize");
    }
  }
  if (wants_help) return v;
  if (!has_shape) throw UsageError("visualize needs --shape, e.g. --shape 8192,8192");
  // Stops multiplying at the limit, so no number of axes can overflow the product.
  long long devices = 1;
  for (const int s : v.mesh_sizes) {
    devices *= s;
    if (devices > kMaxDevices)
      throw UsageError("--mesh " + mesh_text(v.mesh_sizes) + " has more than " +
                       std::to_string(kMaxDevices) + " devices; use at most " +
                       std::to_string(kMaxDevices) + " (the limit of meshvk visualize)");
  }
  const size_t rank = v.mesh_sizes.size();
  if (!has_axes) {
    static const std::vector<std::vector<std::string>> kDefaultAxes = {
        {"x"}, {"x", "y"}, {"x", "y", "z"}};
    if (rank > kDefaultAxes.size())
      throw UsageError("--mesh has " + std::to_string(rank) +
                       " axes; name them with --axes (default names exist for up to 3 axes)");
    v.axis_names = kDefaultAxes[rank - 1];
  } else if (v.axis_names.size() != rank) {
    throw UsageError("--axes gives " + std::to_string(v.axis_names.size()) +
                     " name(s) but --mesh has " + std::to_string(rank) +
                     " axes; give one name per mesh axis");
  }
  return v;
}

}  // namespace

CliArgs parse_args(const std::vector<std::string>& args) {
  if (args.empty()) throw UsageError("no command given");
  CliArgs cli;
  const std::string& command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "help" || command == "--help" || command == "-h") {
    cli.command = Command::Help;
  } else if (command == "--version" || command == "version") {
    if (!rest.empty()) throw UsageError(command + " takes no option '" + rest[0] + "'");
    cli.command = Command::Version;
  } else if (command == "devices") {
    cli.command = Command::Devices;
    for (const std::string& a : rest) {
      if (a != "--help" && a != "-h") throw UsageError("devices takes no option '" + a + "'");
      cli.command = Command::Help;
    }
  } else if (command == "visualize") {
    bool wants_help = false;
    cli.visualize = parse_visualize(rest, wants_help);
    cli.command = wants_help ? Command::Help : Command::Visualize;
  } else if (command == "estimate") {
    cli.command = Command::Estimate;
    for (size_t i = 0; i < rest.size(); ++i) {
      const std::string& a = rest[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= rest.size()) throw UsageError("estimate: " + a + " needs a value");
        return rest[++i];
      };
      if (a == "--hardware") cli.estimate.hardware.push_back(value());
      else if (a == "--program") cli.estimate.programs.push_back(value());
      else if (a == "--sample") cli.estimate.samples.push_back(value());
      else if (a == "--small") cli.estimate.small = true;
      else if (a == "--measure") cli.estimate.measure = true;
      else if (a == "--list") cli.estimate.list = true;
      else if (a == "--trace") cli.estimate.trace = value();
      else if (a == "--print-hardware") cli.estimate.print_hardware = value();
      else if (a == "--help" || a == "-h") cli.command = Command::Help;
      else
        throw UsageError("estimate: unknown option '" + a +
                         "'; valid: --hardware, --program, --sample, --small, --measure, --trace, --print-hardware, --list");
    }
  } else {
    throw UsageError("unknown command '" + command + "'; use devices, visualize, estimate, help or --version");
  }
  return cli;
}

int mesh_device_count(const VisualizeArgs& v) {
  int devices = 1;
  for (const int s : v.mesh_sizes) devices *= s;
  return devices;
}

meshvk::Sharding visualize_sharding_of(const VisualizeArgs& v, const std::string& platform) {
  meshvk::PartitionSpec spec;
  try {
    spec = meshvk::PartitionSpec::parse(v.spec);
  } catch (const meshvk::Error& e) {
    throw UsageError(std::string("--spec: ") + e.what());
  }
  const meshvk::Mesh mesh(v.mesh_sizes, v.axis_names, {}, {}, platform);
  const meshvk::Sharding sharding = meshvk::NamedSharding(mesh, spec);
  sharding.check_shape(v.shape);
  return sharding;
}

}  // namespace meshvk_cli
