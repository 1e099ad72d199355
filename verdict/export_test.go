package verdict

// setFault injects a failure before each file write while f returns an error.
func (w *Writer) setFault(f func() error) {
	w.f.mu.Lock()
	w.f.fault = f
	w.f.mu.Unlock()
}
