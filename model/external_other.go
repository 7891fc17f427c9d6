//go:build !unix

package model

import "os/exec"

func setProcessGroup(cmd *exec.Cmd) {}

func killProcess(cmd *exec.Cmd) { cmd.Process.Kill() }
