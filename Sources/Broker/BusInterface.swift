extension BusAPI {
    /// The introspection data of `org.browserlogin.Broker1`: dbus/org.browserlogin.Broker1.xml
    /// without its comments (the contract; DBusAPITests checks that introspection matches it).
    static let interfaceXML = """
        <node name="/org/browserlogin/Broker1">
          <interface name="org.browserlogin.Broker1">
            <method name="Info">
              <arg name="info" type="a{sv}" direction="out"/>
            </method>
            <method name="ListClients">
              <arg name="clients" type="aa{sv}" direction="out"/>
            </method>
            <method name="Start">
              <arg name="client" type="s" direction="in"/>
              <arg name="options" type="a{sv}" direction="in"/>
              <arg name="attempt" type="a{sv}" direction="out"/>
            </method>
            <method name="Resume">
              <arg name="attempt_id" type="s" direction="in"/>
              <arg name="options" type="a{sv}" direction="in"/>
              <arg name="attempt" type="a{sv}" direction="out"/>
            </method>
            <method name="Finish">
              <arg name="url" type="s" direction="in"/>
              <arg name="attempt" type="a{sv}" direction="out"/>
            </method>
            <method name="Cancel">
              <arg name="attempt_id" type="s" direction="in"/>
              <arg name="attempt" type="a{sv}" direction="out"/>
            </method>
            <method name="Status">
              <arg name="attempt_id" type="s" direction="in"/>
              <arg name="options" type="a{sv}" direction="in"/>
              <arg name="attempt" type="a{sv}" direction="out"/>
            </method>
            <method name="Acknowledge">
              <arg name="attempt_id" type="s" direction="in"/>
              <arg name="attempt" type="a{sv}" direction="out"/>
            </method>
            <method name="ListAttempts">
              <arg name="options" type="a{sv}" direction="in"/>
              <arg name="attempts" type="aa{sv}" direction="out"/>
            </method>
            <method name="GetSession">
              <arg name="client" type="s" direction="in"/>
              <arg name="session" type="a{sv}" direction="out"/>
            </method>
            <method name="WaitSession">
              <arg name="client" type="s" direction="in"/>
              <arg name="options" type="a{sv}" direction="in"/>
              <arg name="session" type="a{sv}" direction="out"/>
            </method>
            <method name="SignOut">
              <arg name="client" type="s" direction="in"/>
              <arg name="session" type="a{sv}" direction="out"/>
            </method>
            <method name="GetAccountSession">
              <arg name="client" type="s" direction="in"/>
              <arg name="account" type="s" direction="in"/>
              <arg name="session" type="a{sv}" direction="out"/>
            </method>
            <method name="SignOutAccount">
              <arg name="client" type="s" direction="in"/>
              <arg name="account" type="s" direction="in"/>
              <arg name="session" type="a{sv}" direction="out"/>
            </method>
            <method name="ListSessions">
              <arg name="client" type="s" direction="in"/>
              <arg name="sessions" type="aa{sv}" direction="out"/>
            </method>
            <method name="UseAccount">
              <arg name="client" type="s" direction="in"/>
              <arg name="account" type="s" direction="in"/>
              <arg name="session" type="a{sv}" direction="out"/>
            </method>
            <method name="Request">
              <arg name="client" type="s" direction="in"/>
              <arg name="method" type="s" direction="in"/>
              <arg name="path" type="s" direction="in"/>
              <arg name="options" type="a{sv}" direction="in"/>
              <arg name="response" type="a{sv}" direction="out"/>
            </method>
            <signal name="SessionChanged">
              <arg name="session" type="a{sv}"/>
            </signal>
            <signal name="LoginChanged">
              <arg name="attempt" type="a{sv}"/>
            </signal>
            <method name="Subscribe">
              <arg name="options" type="a{sv}" direction="in"/>
              <arg name="subscription" type="s" direction="out"/>
            </method>
            <method name="Unsubscribe">
              <arg name="subscription" type="s" direction="in"/>
            </method>
          </interface>
        </node>
        """
}
