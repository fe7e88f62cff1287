"""Small hand-written manifests shared by the manifest tests."""

from __future__ import annotations

EVENTS_NS = "http://schemas.microsoft.com/win/2004/08/events"
WIN_NS = "http://manifests.microsoft.com/win/2004/08/windows/events"
XS_NS = "http://www.w3.org/2001/XMLSchema"


def manifest(provider_body: str, strings: str = "", provider_attrs: str = "") -> str:
    """A whole manifest around one provider's children."""
    attrs = provider_attrs or 'name="Contoso-Sample" guid="{11111111-2222-3333-4444-555555555555}" symbol="CONTOSO"'
    return f"""<?xml version="1.0" encoding="utf-8"?>
<instrumentationManifest xmlns="{EVENTS_NS}" xmlns:win="{WIN_NS}" xmlns:xs="{XS_NS}">
  <instrumentation>
    <events>
      <provider {attrs} resourceFileName="c.dll" messageFileName="c.dll" message="$(string.Provider)">
{provider_body}
      </provider>
    </events>
  </instrumentation>
  <localization>
    <resources culture="en-US">
      <stringTable>
        <string id="Provider" value="Contoso Sample"/>
{strings}
      </stringTable>
    </resources>
  </localization>
</instrumentationManifest>
"""


FULL_PROVIDER = """
        <channels>
          <importChannel chid="SYS" name="System"/>
          <channel chid="OP" name="Contoso-Sample/Operational" type="Operational" enabled="true" symbol="CH_OP"/>
          <channel chid="AN" name="Contoso-Sample/Analytic" type="Analytic" value="20"/>
          <channel chid="ADM" name="Contoso-Sample/Admin" type="Admin" message="$(string.AdminChannel)"/>
        </channels>
        <levels>
          <level name="Chatty" value="16" symbol="L_CHATTY" message="$(string.Chatty)"/>
        </levels>
        <tasks>
          <task name="Connect" value="1" symbol="T_CONNECT" eventGUID="{aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee}">
            <opcodes>
              <opcode name="Handshake" value="10" symbol="O_HS"/>
              <opcode name="Shared" value="11"/>
            </opcodes>
          </task>
          <task name="Disconnect" value="2"/>
        </tasks>
        <opcodes>
          <opcode name="Shared" value="12"/>
          <opcode name="Retry" value="13"/>
        </opcodes>
        <keywords>
          <keyword name="Network" mask="0x1" symbol="KW_NET"/>
          <keyword name="Disk" mask="0x0000000000000010"/>
        </keywords>
        <maps>
          <valueMap name="State">
            <map value="0" message="$(string.State.Idle)"/>
            <map value="1" message="$(string.State.Busy)"/>
          </valueMap>
          <bitMap name="Flags">
            <map value="0x1" message="$(string.Flag.Read)"/>
            <map value="0x2" message="$(string.Flag.Write)"/>
          </bitMap>
        </maps>
        <templates>
          <template tid="T_Connect">
            <data name="Host" inType="win:UnicodeString"/>
            <data name="Port" inType="win:UInt16" outType="win:Port"/>
            <data name="State" inType="win:UInt32" map="State"/>
            <data name="Flags" inType="win:UInt32" map="Flags"/>
            <data name="Size" inType="win:UInt32"/>
            <data name="Blob" inType="win:Binary" length="Size"/>
            <data name="Fixed" inType="win:Binary" length="16"/>
            <data name="Count" inType="win:UInt16"/>
            <struct name="Items" count="Count">
              <data name="Id" inType="win:UInt32"/>
              <data name="Name" inType="win:AnsiString"/>
            </struct>
            <data name="Pair" inType="win:UInt32" count="2"/>
          </template>
          <template tid="T_Empty"/>
        </templates>
        <events>
          <event value="1" symbol="ConnectStart" task="Connect" opcode="win:Start" level="win:Informational"
                 keywords="Network Disk" channel="OP" template="T_Connect" message="$(string.Connect.Start)"/>
          <event value="1" version="1" symbol="ConnectStartV1" task="Connect" opcode="Handshake" level="Chatty"
                 keywords="Network" channel="AN" template="T_Connect"/>
          <event value="2" symbol="SharedLocal" task="Connect" opcode="Shared" level="win:Verbose" channel="SYS"/>
          <event value="3" symbol="SharedGlobal" task="Disconnect" opcode="Shared" level="win:Error" channel="ADM"
                 message="$(string.Admin.Event)"/>
          <event value="0x10" symbol="Plain"/>
        </events>
"""

FULL_STRINGS = """
        <string id="AdminChannel" value="Admin channel"/>
        <string id="Chatty" value="Chatty level"/>
        <string id="State.Idle" value="Idle"/>
        <string id="State.Busy" value="Busy"/>
        <string id="Flag.Read" value="Read"/>
        <string id="Flag.Write" value="Write"/>
        <string id="Connect.Start" value="Connecting to %1:%2 (state %3)%n"/>
        <string id="Admin.Event" value="Disconnected"/>
"""


def full_manifest() -> str:
    return manifest(FULL_PROVIDER, FULL_STRINGS)


def assembly_manifest(provider_body: str, strings: str = "") -> str:
    """The same provider inside Windows' component-manifest wrapper, as PowerShell ships it."""
    return f"""<?xml version='1.0' encoding='utf-8' standalone='yes'?>
<!-- component manifest -->
<assembly xmlns="urn:schemas-microsoft-com:asm.v3" manifestVersion="1.0">
  <assemblyIdentity name="Contoso" version="$(build.version)" buildType="$(build.buildType)"/>
  <instrumentation xmlns:win="{WIN_NS}" xmlns:xs="{XS_NS}">
    <events xmlns="{EVENTS_NS}">
      <provider name="Contoso-Sample" guid="{{11111111-2222-3333-4444-555555555555}}" message="$(string.Provider)">
{provider_body}
      </provider>
    </events>
    <counters xmlns="http://schemas.microsoft.com/win/2005/12/counters">
      <provider providerGuid="{{5db760bc-64b2-4da7-b4ef-7dab105fbb8c}}" symbol="Counters"/>
    </counters>
  </instrumentation>
  <localization>
    <resources culture="en-US">
      <stringTable>
        <string id="Provider" value="Contoso Sample"/>
{strings}
      </stringTable>
    </resources>
  </localization>
</assembly>
"""
