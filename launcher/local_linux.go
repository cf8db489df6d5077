package launcher

import "syscall"

func sysProcAttr() *syscall.SysProcAttr {
	// Pdeathsig: if the launcher is SIGKILLed it cannot stop its ranks, so the kernel does.
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
