/* Subcommands of the `drift` command (DESIGN.md s9). Each takes the argv
 * after the subcommand name (argv[0] is the subcommand name itself), prints
 * its own --help, and returns the process exit code: 0 success, 1 a check
 * the user asked for failed, 2 bad usage or bad input. Errors go to stderr
 * as "drift <cmd>: <where>: <what>". With --json, stdout holds one JSON
 * document and nothing else. */
#ifndef DRIFT_CLI_COMMANDS_H
#define DRIFT_CLI_COMMANDS_H

typedef int (*drift_cmd_fn)(int argc, char **argv);

int drift_cmd_demo(int argc, char **argv);
int drift_cmd_record(int argc, char **argv);
int drift_cmd_ls(int argc, char **argv);
int drift_cmd_check(int argc, char **argv);
int drift_cmd_plan(int argc, char **argv);
int drift_cmd_replay(int argc, char **argv);
int drift_cmd_compare(int argc, char **argv);
int drift_cmd_bisect(int argc, char **argv);
int drift_cmd_top(int argc, char **argv);
int drift_cmd_merge(int argc, char **argv);
int drift_cmd_report(int argc, char **argv);
int drift_cmd_weights(int argc, char **argv);
int drift_cmd_invariance(int argc, char **argv);

#endif
