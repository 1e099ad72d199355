package verdict

// setFault replaces each file write(2) with f.
func (w *Writer) setFault(f func(fd int, b []byte) (int, error)) {
	w.f.mu.Lock()
	w.f.fault = f
	w.f.mu.Unlock()
}

// failWhile returns a fault that fails writes while cond() is true and
// otherwise writes normally.
func failWhile(cond func() bool) func(int, []byte) (int, error) {
	return func(fd int, b []byte) (int, error) {
		if cond() {
			return 0, errInjected
		}
		return writeOnce(fd, b)
	}
}
