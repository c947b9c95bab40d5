// Package configcheck backs the `config check` commands of flotilla-agent
// and flotilla-hub: it reads a config file the way internal/config does
// (the same YAML parser viper uses) and reports, with the file and line,
// what the commands would otherwise get wrong or silently ignore.
//
// It checks what is about the file itself: that it is a YAML mapping,
// that every key is one of the command's flags (with a "did you mean"
// for a near miss), that no key is given twice, and that each value has
// the shape and type its flag takes. viper converts values leniently
// (a duration of "30" becomes 30ns, "yes" becomes false), so a wrong type
// would otherwise start a misconfigured device instead of stopping it.
// Keys whose value is a map or a list in the file (the agent's labels and
// registries) are described with a Shape; a struct shape is checked
// field by field from its mapstructure tags, so the check follows the Go
// type that run decodes into.
//
// Whether the values make sense together (a node name that is a DNS
// name, an absolute data dir, a hub without credentials) is decided by
// the command's own validation, the code `run` and `serve` use; Locate
// turns that validation's error into problems at the lines of the keys it
// names.
package configcheck
