package main
import (
 _ "github.com/creack/pty"
 _ "modernc.org/sqlite"
 _ "golang.org/x/sys/unix"
 _ "github.com/rs/zerolog"
 _ "go.uber.org/goleak"
)
func main(){}
