; Inno Setup script for Hisho on Windows: packages the PyInstaller folder that packaging/hisho.spec makes
; (dist\hisho: hisho.exe without a console, hisho-cli.exe for terminals). NOT BUILT OR RUN on our Linux
; machines; packaging/README.md gives the commands and says what is untested.
;   iscc /DAppVersion=0.1.0 packaging\windows\hisho.iss      (output: dist\hisho-0.1.0-setup.exe)
; Per-user install (no admin rights) into %LOCALAPPDATA%\Programs\Hisho. User data is never in the install:
; conversations, KV snapshots, models and logs are in %LOCALAPPDATA%\Hisho, settings in %LOCALAPPDATA%\Hisho
; (platformdirs). The uninstaller keeps them unless the user ticks "Also remove my data".

#ifndef AppVersion
  #define AppVersion "0.0.0"
#endif

[Setup]
AppId={{6F1B8F2E-8C1D-4B7E-9A51-2D4C1E7A9B30}
AppName=Hisho
AppVersion={#AppVersion}
AppPublisher=Hisho developers
DefaultDirName={autopf}\Hisho
DefaultGroupName=Hisho
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename=hisho-{#AppVersion}-setup
SetupIconFile=..\..\build\icons\hisho.ico
UninstallDisplayIcon={app}\hisho.exe
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
; An upgrade replaces the program files only; the user's folders are elsewhere.
UsePreviousAppDir=yes
CloseApplications=yes

[Files]
Source: "..\..\dist\hisho\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\Hisho"; Filename: "{app}\hisho.exe"
Name: "{group}\Uninstall Hisho"; Filename: "{uninstallexe}"
Name: "{userdesktop}\Hisho"; Filename: "{app}\hisho.exe"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "Create a desktop icon"; Flags: unchecked

[Run]
Filename: "{app}\hisho.exe"; Description: "Start Hisho"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; Files the app may write next to itself (none expected); never the user's folders.
Type: filesandordirs; Name: "{app}\__pycache__"

[Code]
var
  RemoveDataPage: TInputOptionWizardPage;
  RemoveData: Boolean;

function InitializeUninstall(): Boolean;
begin
  RemoveData := False;
  Result := True;
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
begin
  if CurUninstallStep = usUninstall then
  begin
    RemoveData := MsgBox('Also remove my data?' + #13#10 + #13#10 +
      'Conversations, KV snapshots, models, settings and logs in ' + ExpandConstant('{localappdata}\Hisho') +
      '. Choose No to keep them for a later install.', mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES;
  end;
  if (CurUninstallStep = usPostUninstall) and RemoveData then
    DelTree(ExpandConstant('{localappdata}\Hisho'), True, True, True);
end;
