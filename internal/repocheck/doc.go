// Package repocheck holds no code: its tests check the repository as a new
// user meets it from a fresh clone — every relative link in the Markdown
// files points to a file of the repository (never outside it, to design notes
// that are not part of it), and `make bench` holds no 4,000-session step
// (those are `make bench-scale`'s).
package repocheck
