package main

import "github.com/asyrevel/asyrevel/internal/cli"

func main() { cli.Main() }
