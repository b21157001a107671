# Copies a D-Bus interface file, adding the Qt type of each a{sv} and aa{sv}
# argument: Qt 5's qdbusxml2cpp refuses a dictionary argument without one.
# a{sv} is QVariantMap; aa{sv} is QVariantMapList (QList<QVariantMap>, see
# qt-types.h). Method arguments are numbered per direction (In0, In1, …,
# Out0, …); signal arguments are Out<N> in Qt 5 and In<N> in Qt 6: both are
# written. Expects one <arg/> per line, as org.browserlogin.Broker1.xml is.
/<(method|signal)[ >]/ { inputs = 0; outputs = 0; signal = ($0 ~ /<signal/) }
/<arg[ >]/ {
  print
  if (gsub(/<arg[ >]/, "&") > 1) { print "qt-annotate.awk: more than one <arg> on line " NR > "/dev/stderr"; exit 1 }
  qt = ""
  if ($0 ~ /type="a[{]sv[}]"/) qt = "QVariantMap"
  else if ($0 ~ /type="aa[{]sv[}]"/) qt = "QVariantMapList"
  if (signal) {
    if (qt != "") {
      printf "      <annotation name=\"org.qtproject.QtDBus.QtTypeName.Out%d\" value=\"%s\"/>\n", outputs, qt
      printf "      <annotation name=\"org.qtproject.QtDBus.QtTypeName.In%d\" value=\"%s\"/>\n", outputs, qt
    }
    outputs++
  } else if ($0 ~ /direction="out"/) {
    if (qt != "") printf "      <annotation name=\"org.qtproject.QtDBus.QtTypeName.Out%d\" value=\"%s\"/>\n", outputs, qt
    outputs++
  } else {
    if (qt != "") printf "      <annotation name=\"org.qtproject.QtDBus.QtTypeName.In%d\" value=\"%s\"/>\n", inputs, qt
    inputs++
  }
  next
}
{ print }
