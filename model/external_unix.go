//go:build unix

package model

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts the model in its own process group, so that
// killing it also kills what it started (a shell wrapper's child, a
// worker pool) and a terminal's Ctrl-C reaches only the party, which then
// closes the model in order.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcess kills the model's process group.
func killProcess(cmd *exec.Cmd) {
	if pid := cmd.Process.Pid; pid > 0 {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
	cmd.Process.Kill()
}
