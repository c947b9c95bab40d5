package printers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// PrintOptions say how a table reads as text.
type PrintOptions struct {
	// Wide shows priority 1 columns.
	Wide bool
	// NoHeaders leaves out the header line.
	NoHeaders bool
	// WithNamespace adds a NAMESPACE column first (for --all-namespaces);
	// it needs each row's Object (Metadata or Object).
	WithNamespace bool
	// ShowLabels adds a LABELS column last; it needs each row's Object.
	ShowLabels bool
}

// NewTabWriter aligns columns as kubectl does.
func NewTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 10, 4, 3, ' ', 0)
}

// PrintTable writes a table as kubectl prints it: upper-case headers,
// columns aligned, wide columns only with Wide. The caller flushes w when it
// is a tabwriter; otherwise PrintTable aligns the output itself.
func PrintTable(w io.Writer, t *metav1.Table, opts PrintOptions) error {
	tw, own := w.(*tabwriter.Writer)
	if !own {
		tw = NewTabWriter(w)
	}
	keep := keptColumns(t.ColumnDefinitions, opts.Wide)
	if !opts.NoHeaders {
		var head []string
		if opts.WithNamespace {
			head = append(head, "NAMESPACE")
		}
		for _, i := range keep {
			head = append(head, strings.ToUpper(t.ColumnDefinitions[i].Name))
		}
		if opts.ShowLabels {
			head = append(head, "LABELS")
		}
		fmt.Fprintln(tw, strings.Join(head, "\t"))
	}
	for _, row := range t.Rows {
		var cells []string
		var m metav1.Object
		if opts.WithNamespace || opts.ShowLabels {
			var err error
			if m, err = rowMeta(row); err != nil {
				return err
			}
		}
		if opts.WithNamespace {
			cells = append(cells, m.GetNamespace())
		}
		for _, i := range keep {
			if i >= len(row.Cells) {
				return fmt.Errorf("table row has %d cells for %d columns", len(row.Cells), len(t.ColumnDefinitions))
			}
			cells = append(cells, cellText(row.Cells[i]))
		}
		if opts.ShowLabels {
			cells = append(cells, labels.FormatLabels(m.GetLabels()))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if !own {
		return tw.Flush()
	}
	return nil
}

// cellText prints a cell; tabs and newlines would break the alignment.
func cellText(c any) string {
	var s string
	switch v := c.(type) {
	case nil:
		s = ""
	case string:
		s = v
	case float64:
		// Cells decoded from JSON carry numbers as float64.
		if v == float64(int64(v)) {
			s = fmt.Sprintf("%d", int64(v))
		} else {
			s = fmt.Sprint(v)
		}
	default:
		s = fmt.Sprint(v)
	}
	return strings.NewReplacer("\t", " ", "\n", " ").Replace(s)
}

// rowMeta finds the metadata of a row's object, whether it was built here
// (Object set) or decoded from the hub's answer (Raw set).
func rowMeta(row metav1.TableRow) (metav1.Object, error) {
	if row.Object.Object != nil {
		return meta.Accessor(row.Object.Object)
	}
	if len(row.Object.Raw) == 0 {
		return nil, fmt.Errorf("table row carries no object: request it with includeObject=Metadata")
	}
	var partial metav1.PartialObjectMetadata
	if err := json.NewDecoder(bytes.NewReader(row.Object.Raw)).Decode(&partial); err != nil {
		return nil, fmt.Errorf("decoding table row object: %w", err)
	}
	return &partial, nil
}
