// weightport: move model weights between GPUs and hosts; model the interconnects they cross.
#include <iostream>
#include <new>
#include <stdexcept>

#include "cli/cli_common.h"
#include "cli/option_checks.h"

int main(int argc, char** argv) {
  using namespace weightport::cli;
  CLI::App app{
      "weightport: move model weights between GPUs and hosts at the speed of the hardware,\n"
      "and model the interconnects those moves run on.",
      "weightport"};
  app.set_version_flag("--version", std::string("weightport ") + WEIGHTPORT_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 success, 1 failure, 2 usage error.\nRun 'weightport COMMAND --help' for a command's "
      "options.");

  const std::vector<Command> commands = {
      AddDemoCommand(app),    AddGenModelCommand(app), AddInspectCommand(app), AddManifestCommand(app),
      AddConvertCommand(app), AddInfoCommand(app),     AddPublishCommand(app), AddSubscribeCommand(app),
      AddServeCommand(app),   AddPlanCommand(app),     AddReshardCommand(app), AddTopologyCommand(app),
      AddSimCommand(app),     AddHbdCommand(app),      AddFedCommand(app),     AddCoordinatorCommand(app)};
  RefuseMeaninglessNumbers(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  for (const auto& command : commands) {
    if (!command.sub->parsed()) continue;
    // The last resort: a command checks its inputs before it allocates, so reaching either handler
    // is a defect; it still ends with a message and exit code 1, not an abort.
    try {
      return command.run();
    } catch (const std::bad_alloc&) {
      std::cerr << "weightport " << command.sub->get_name()
                << ": out of memory (an input asked for more than this machine has)\n";
    } catch (const std::exception& e) {
      std::cerr << "weightport " << command.sub->get_name() << ": internal error: " << e.what() << "\n";
    }
    return kExitFailure;
  }
  return kExitUsage;
}
