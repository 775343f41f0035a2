import FoundationEssentials
// A bare Swift process that links FoundationEssentials only (no Foundation, no ICU data), using one of
// its types: what vault's client path would load without Foundation.
print("hello \(Data([1, 2, 3]).count)")
