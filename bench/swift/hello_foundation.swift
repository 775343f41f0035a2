import Foundation
// A bare Swift process that also loads Foundation and reads the environment, as every vault run does.
print("hello \(ProcessInfo.processInfo.environment.count)")
