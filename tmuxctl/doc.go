// Package tmuxctl is the tmux control-mode wire of skc-supervisor: a
// byte-exact parser of what `tmux -C` writes, an argument encoder, one
// control connection (Conn) with pipelined commands and a notification
// stream, and a reconnecting Client. It knows nothing about identities;
// it is built on tmux 3.3a's behaviour and tested against 3.3a and 3.7c
// (docs/tmux-versions.md).
//
// The connection. Dial starts
//
//	tmux -S SOCK [-f CONF] -u -C new-session -A -s skc-control -x 80 -y 24 -f no-output,ignore-size cat
//
// on plain pipes (no pty: -C works on pipes, -CC needs a tty), in its own
// process group, with Pdeathsig SIGKILL armed from an OS thread that stays
// locked for the child's life (see startProc). It sends nothing until the
// argv command's flags-0 block has closed (3.3a reads stdin early), then
// reads the server identity (#{pid}, #{start_time}, #{version},
// #{socket_path}, #{session_id} in one display-message) and tags the
// control session `@skc-control 1`.
//
// Commands. One command per line, every element double-quote encoded
// (Quote), so a line is never blank, a comment or two commands and yields
// exactly one reply block; replies with flags 1 are matched FIFO. Blocks
// with other flags (the argv command, hooks our commands triggered) belong
// to no command. The outcome of a command is one of:
//   - a Reply (an %end block);
//   - *CommandError (an %error block, with the command line and the lines);
//   - ErrNotConnected (wrapped): never sent;
//   - ErrServerExited (an *ExitError): sent, and the client ended before a
//     reply came (%exit or EOF) — outcome unknown, fails promptly;
//   - ctx's error: sent, no reply in time — outcome unknown; the late reply
//     is consumed and dropped, so later commands stay in step.
//
// Notifications are delivered in wire order from an unbounded queue, so the
// reader never blocks. Lines outside blocks that are not notifications (hook
// output, multi-line subscription values) are logged and skipped.
//
// Closing first removes every subscription added through Command
// (`refresh-client -B name:…` is tracked automatically) and waits for the
// replies: 3.3a's subscription timer dereferences the session of a client
// that is exiting (docs/tmux-facts.md §6; seen here as a server segfault in the
// session-subscription check). Then it closes the client's stdin (after
// queued lines), waits for %exit and the client's exit
// (Config.CloseTimeout), and kills the client by pid only if it hangs.
//
// A second crash of tmux before 3.7: a control client that has identified
// as one but whose control state does not exist yet gets the next
// notification written through a NULL pointer (control_write), so any
// attach, detach or session created while another control client connects
// can kill the server. Our control clients therefore identify, detach and
// (on servers < 3.7) send commands that notify other clients under one
// flock per socket, across processes (attachlock.go).
//
// Versions. The server's version is read at connect (ServerInfo.Version).
// tmux 3.4 and 3.5 escape command output (\ooo, \a \b \v \f \r; the
// backslash itself is not escaped): Reply.Escaped marks such replies and
// Reply.Text undoes the escaping, saying when it may be ambiguous
// (escape.go). 3.4 added %paste-buffer-changed, %paste-buffer-deleted,
// %message and %config-error (logged). docs/tmux-versions.md has the rest.
//
// The wire. Lines split on LF only, one trailing CR removed, no length cap.
// A block opens on `%begin T N F` and closes only on `%end T N F` or
// `%error T N F` with exactly the same fields; inside, every line is data
// (including `%pause`/`%continue`, which 3.3a writes inside the
// refresh-client block that caused them). %output data is decoded strictly
// (backslash + three octal digits, first 0–3 → one byte; anything else kept).
package tmuxctl
