// Example tool: a WASI 0.1 command in Go that counts like `wc`, the twin of the Rust
// guest-sdk/tools/wordcount component.
//
// `gowordcount [-l] [-w] [-c] [--file PATH]` prints `lines words bytes` of stdin (or of PATH);
// the flags pick which counts to print, in that order. A bad flag exits 2, an unreadable input 1.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -o gowordcount.wasm .
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

type options struct {
	lines, words, bytes bool
	file                string
}

func parse(args []string) (options, error) {
	var o options
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-l":
			o.lines = true
		case "-w":
			o.words = true
		case "-c":
			o.bytes = true
		case "--file":
			if i+1 == len(args) {
				return o, fmt.Errorf("--file needs a PATH")
			}
			i++
			o.file = args[i]
		default:
			return o, fmt.Errorf("unknown flag %s", args[i])
		}
	}
	if !o.lines && !o.words && !o.bytes {
		o.lines, o.words, o.bytes = true, true, true
	}
	return o, nil
}

func input(file string) ([]byte, error) {
	if file == "" {
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, fmt.Errorf("stdin: %w", err)
		}
		return data, nil
	}
	return os.ReadFile(file)
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gowordcount: %v\n", err)
		os.Exit(2)
	}
	data, err := input(o.file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gowordcount: %v\n", err)
		os.Exit(1)
	}
	var shown []string
	if o.lines {
		shown = append(shown, strconv.Itoa(bytes.Count(data, []byte{'\n'})))
	}
	if o.words {
		shown = append(shown, strconv.Itoa(len(bytes.Fields(data))))
	}
	if o.bytes {
		shown = append(shown, strconv.Itoa(len(data)))
	}
	fmt.Println(strings.Join(shown, " "))
}
