import SystemSupport

/// The broker logs with the shared logger (Sources/SystemSupport/Logger.swift).
public typealias Logger = SystemSupport.Logger
