#pragma once
// --script: input played into the window as if typed and clicked, a few events per frame, for
// the tests (with --fps 5 they check that nothing is lost at a low frame rate). One command a
// line; '#' starts a comment:
//   wait N              draw N frames
//   wait_arrays         draw until the arrays view shows a picture (at most --timeout)
//   wait_state STATE    draw until the run is in STATE (running, finished, ...)
//   move X Y | move @T  the pointer to a point or to target T's centre
//   click X Y | click @T
//   move_by DX DY       the pointer from where the script last put it
//   mouse_down | mouse_up  the left button alone (a drag: down, wait, move_by, wait, up)
//   key ctrl+a          a key press and release, with modifiers (ctrl, shift, alt)
//   press K | release K one key's press or release alone (K: a, enter, ctrl, shift, ...)
//   type TEXT           characters, as a keyboard would send them
//   scroll DY
//   dump PATH           write the app's state (see write_state)
//   quit
// Targets: tile:N (the N-th tile drawn), or a widget the views recorded in App::widgets
// (spec:NAME, array:NAME, scenario, scenario_item:NAME, mesh, mesh_item:LABEL, zoom, search,
// track, details, details_splitter, tab:collectives, collective_row:N).
// Commands between two waits arrive together, as they would within one slow frame.
#include <optional>
#include <string>
#include <vector>

namespace inspector {

struct App;
class InputQueue;

class Script {
 public:
  static std::optional<Script> load(const std::string& path, std::string& error);
  // Before a frame: queues the events of the commands now due. Returns false once the script
  // has ended (after its last command, or quit), or with `error` set.
  bool step(App& app, InputQueue& input);
  const std::string& error() const { return error_; }

 private:
  std::vector<std::string> lines_;
  size_t next_ = 0;
  int wait_frames_ = 0;
  std::string wait_for_;  // "arrays" or a run state name
  std::string error_;
  double last_x_ = 0, last_y_ = 0;  // where the script last put the pointer
};

// The app's state as key-value lines, for the tests: scenario, run, state, mesh, specs, spec
// error, selected array, zoom, hovered tile and devices, dialogs, mesh choices, frame rate.
void write_state(const App& app, const std::string& path);

}  // namespace inspector
