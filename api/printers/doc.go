// Package printers owns how every served kind reads as a table: the
// columns (with kubectl's names and priorities), the cells of each row, the
// status words kubectl computes for pods and nodes, and the plain-text
// rendering of a metav1.Table.
//
// One implementation serves both sides: the hub answers
// "Accept: application/json;as=Table;g=meta.k8s.io;v=v1" with Table (so
// kubectl prints what it prints against Kubernetes), and flotctl prints the
// same tables from the objects it fetched. Columns of priority 0 are always
// shown; priority 1 columns only with "-o wide", as kubectl does.
package printers
