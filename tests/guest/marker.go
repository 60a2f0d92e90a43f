// A tiny static program for the guest proof (tests/guest/run). Built twice, with GOAMD64=v2 and
// GOAMD64=v3: Go's runtime checks the CPU before main runs, so the marker line is printed only when
// the guest CPU has the level the binary was built for; otherwise the runtime prints "This program
// can only be run on AMD64 processors with vN microarchitecture support." and exits 1.
package main

import (
	"fmt"
	"os"
)

// level is set at link time: -ldflags "-X main.level=V2".
var level = "UNSET"

func main() {
	fmt.Printf("%s-PROGRAM-RAN\n", level)
	os.Exit(0)
}
