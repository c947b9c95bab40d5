// Package output owns how flotctl writes objects: kubectl's tables (from
// api/printers), YAML, JSON, resource/name lines and JSONPath templates.
package output
