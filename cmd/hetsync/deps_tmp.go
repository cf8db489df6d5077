package main
import (
 _ "github.com/libp2p/go-libp2p"
 _ "github.com/klauspost/compress/zstd"
 _ "github.com/urfave/cli/v2"
)
func main(){}
