// cphp-modern: switches QEMU's ACPI CPU hotplug from the legacy register block at I/O port 0xaf00
// to the modern interface by writing one byte of 0 there: the switch QEMU's own AML makes with a
// 4-byte store, which QEMU 5.1.0 to 7.2.0 drop under TCG (the legacy block takes only 1-byte
// accesses; fixed by QEMU commit dab30fbef389, 8.0 and stable 7.2.1). tests/guest/run's hot-plug
// step runs it in the guest to show that the hot-plug itself then reaches the guest. It prints
// one line, CPHP-MODERN: or CPHP-MODERN-FAILED:, and exits 0 or 1.
package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// outb writes value to the I/O port (outb_amd64.s).
func outb(port uint16, value uint8)

const port = 0xaf00

func main() {
	// ioperm grants the calling thread only: keep this goroutine on it.
	runtime.LockOSThread()
	if _, _, e := syscall.RawSyscall(syscall.SYS_IOPERM, port, 1, 1); e != 0 {
		fmt.Printf("CPHP-MODERN-FAILED: ioperm(0x%x): %v\n", port, e)
		os.Exit(1)
	}
	outb(port, 0)
	fmt.Printf("CPHP-MODERN: wrote one byte of 0 to I/O port 0x%x\n", port)
}
