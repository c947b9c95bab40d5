// Command flotctl watches and steers a Flotilla fleet from the command line.
package main
