// The Qt types the generated proxy names for the interface's dictionaries
// (qt-annotate.awk writes them into the XML copy qdbusxml2cpp reads).
#pragma once

#include <QList>
#include <QVariantMap>

// aa{sv}, the lists of views (ListClients, ListAttempts). QList<QVariantMap>
// is a Qt metatype already; main() registers it with QtDBus
// (qDBusRegisterMetaType) so that replies of this signature can be read.
typedef QList<QVariantMap> QVariantMapList;
