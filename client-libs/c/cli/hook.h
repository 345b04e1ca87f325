/* The conformance CLI's "hook" command (cli/hook.c). */
#ifndef CONVERGE_CLI_HOOK_H
#define CONVERGE_CLI_HOOK_H
/* argv: [--proxy URL] [--ca-file PEM] [--path P] [--follow-redirects] [--first URL] [--unhooked-first]
 * HOST PORT (CLIENT-CLI.md); returns the exit status. */
int cli_hook(const char *dir, int argc, char **argv);
#endif
