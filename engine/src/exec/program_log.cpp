#include "exec/program_log.hpp"
#include "kernels/cost.hpp"

#include "profile/hooks.hpp"

namespace meshvk::exec {

namespace {
thread_local ProgramLog* active = nullptr;
}

ProgramLog::ProgramLog() : outer_(active) { active = this; }
ProgramLog::~ProgramLog() { active = outer_; }

bool logging() { return active != nullptr; }

void ProgramLog::forward(const std::vector<std::string>& lines) const {
  if (!outer_) return;
  outer_->lines_.insert(outer_->lines_.end(), lines.begin(), lines.end());
  outer_->collectives_.insert(outer_->collectives_.end(), collectives_.begin(), collectives_.end());
}

std::string name_result(const void* key, const std::string& op) {
  if (!active || !key) return "";
  const int n = active->op_counts_[op]++;
  std::string name = n == 0 ? op : op + "." + std::to_string(n);
  active->names_[key] = name;
  return name;
}

std::string value_name(const void* key) {
  if (!active) return "";
  const auto it = active->names_.find(key);
  return it == active->names_.end() ? "" : it->second;
}

void log_op(const std::string& line) {
  if (active) active->lines_.push_back(line);
}

namespace {
thread_local CallSite call_site;
thread_local std::string rule;
}  // namespace

const CallSite& current_call_site() { return call_site; }
CallSiteScope::CallSiteScope(const CallSite& site) : saved_(call_site) { call_site = site; }
CallSiteScope::~CallSiteScope() { call_site = saved_; }

const std::string& current_rule() { return rule; }
void RuleScope::set(std::string r) {
  rule = std::move(r);
  set_ = true;
}
RuleScope::~RuleScope() {
  if (set_) rule.clear();
}
RuleOverride::RuleOverride(std::string r) : saved_(std::move(rule)) { rule = std::move(r); }
RuleOverride::~RuleOverride() { rule = std::move(saved_); }

std::string short_function(const char* signature) {
  if (!signature) return "";
  std::string s = signature;
  // "R ns::name(args) [with ...]" -> "name"; a lambda ("ns::f(args)::<lambda(...)>") -> "f lambda".
  const size_t lambda = s.find("::<lambda");
  if (lambda != std::string::npos) s = s.substr(0, lambda);
  std::string head = s.substr(0, s.find('('));
  const size_t space = head.find_last_of(' ');
  if (space != std::string::npos) head = head.substr(space + 1);
  const size_t colons = head.rfind("::");
  if (colons != std::string::npos) head = head.substr(colons + 2);
  return lambda == std::string::npos ? head : head + " lambda";
}

std::string provenance_text(const std::string& why, const CallSite& site) {
  std::string s = "  # " + (why.empty() ? std::string("(no rule recorded)") : why);
  if (!site.known()) return s;
  std::string file = site.file;
  const size_t slash = file.find_last_of("/\\");
  if (slash != std::string::npos) file = file.substr(slash + 1);
  s += " - " + file + ":" + std::to_string(site.line);
  const std::string function = short_function(site.function);
  if (!function.empty()) s += " (" + function + ")";
  if (site.backward) s += " [backward]";
  return s;
}

void log_collective(const std::string& kind, uint64_t bytes, const std::string& line,
                    const std::vector<std::string>& axes, const Mesh* mesh) {
  if (!active) return;
  kernels::CollectiveWork::log(kind, axes, bytes, mesh);
  const std::string provenance = provenance_text(rule, call_site);
  active->lines_.push_back(line + provenance);
  active->collectives_.push_back({kind, bytes, axes, rule, call_site});
  if (profile::on()) profile::set_rule(provenance.substr(4));  // without the "  # "
}

void note_provenance() {
  if (active && profile::on()) profile::set_rule(provenance_text(rule, call_site).substr(4));
}

CollectiveMark mark_collectives() {
  return {active, active ? active->collectives_.size() : 0};
}

CollectiveRepeat::CollectiveRepeat(const CollectiveMark& from, const CollectiveMark& to) : from_(from) {
  if (!active || from.log != active || to.log != active) return;
  for (size_t i = from.index; i < to.index && i < active->collectives_.size(); ++i)
    times_.push_back(active->collectives_[i].times);
}

void CollectiveRepeat::repeat() const {
  if (!active || from_.log != active) return;
  for (size_t i = 0; i < times_.size() && from_.index + i < active->collectives_.size(); ++i)
    active->collectives_[from_.index + i].times += times_[i];
}

}  // namespace meshvk::exec
