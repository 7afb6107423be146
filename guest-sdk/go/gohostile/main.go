// Test fixture: a WASI 0.1 command in Go that misbehaves on request, so the tests can show
// that a Go tool meets the same grants and limits as a component.
//
//	gohostile spin              loops forever
//	gohostile alloc             allocates without bound, touching every page
//	gohostile read PATH         prints the file at PATH
//	gohostile write PATH TEXT   writes TEXT to the file at PATH
//	gohostile env NAME          prints the variable NAME, or exits 1 when it is unset
//	gohostile exit CODE         exits with CODE
//	gohostile flood BYTES       prints BYTES bytes of 'x'
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// kept holds what alloc allocates, so the collector can free none of it.
var kept [][]byte

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gohostile: "+format+"\n", args...)
	os.Exit(1)
}

func number(text string) int {
	n, err := strconv.Atoi(text)
	if err != nil {
		fail("not a number: %s", text)
	}
	return n
}

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		fail("usage: gohostile spin|alloc|read|write|env|exit|flood ...")
	}
	need := func(n int) {
		if len(args) < n+1 {
			fail("%s needs %d argument(s)", args[0], n)
		}
	}
	switch args[0] {
	case "spin":
		n := 0
		for {
			n++
		}
	case "alloc":
		for {
			block := make([]byte, 1<<20)
			for i := range block {
				block[i] = 1
			}
			kept = append(kept, block)
		}
	case "read":
		need(1)
		data, err := os.ReadFile(args[1])
		if err != nil {
			fail("%v", err)
		}
		os.Stdout.Write(data)
	case "write":
		need(2)
		if err := os.WriteFile(args[1], []byte(args[2]), 0o644); err != nil {
			fail("%v", err)
		}
		fmt.Println("wrote", args[1])
	case "env":
		need(1)
		value, ok := os.LookupEnv(args[1])
		if !ok {
			fail("%s is not set", args[1])
		}
		fmt.Println(value)
	case "exit":
		need(1)
		os.Exit(number(args[1]))
	case "flood":
		need(1)
		fmt.Print(strings.Repeat("x", number(args[1])))
	default:
		fail("unknown command %s", args[0])
	}
}
